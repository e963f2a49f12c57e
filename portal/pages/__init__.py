"""Server-rendered pages the portal app owns: the dashboard, the audit log, a version's compliance
record."""
