"""Writes for the registry: adapters, uploads, the version lifecycle, aliases, base models."""
