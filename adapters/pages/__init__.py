"""Server-rendered registry pages: tenant adapters and versions, uploads, aliases, review."""
