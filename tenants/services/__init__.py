"""Writes for tenancy: tenants, memberships, platform roles and per-adapter grants (tenancy.py),
API tokens (tokens.py), a tenant's signing keys and signature policy (signing_keys.py)."""
