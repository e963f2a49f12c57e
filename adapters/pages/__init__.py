"""Server-rendered pages for the registry: tenant adapters and versions, uploads, aliases, review."""
