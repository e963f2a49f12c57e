"""A real OpenID Connect provider for the SSO tests: django-oauth-toolkit in its own process.

Not the portal: a separate tiny Django project (its own SQLite database, its own RSA key), started
by tests/fixtures/oidc_provider.py on a free loopback port. Tests control its users and groups
through its control endpoints (control.py), guarded by a secret the fixture passes in.
"""
