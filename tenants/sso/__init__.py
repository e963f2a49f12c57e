"""Single sign-on with OpenID Connect: providers from settings, identities keyed by issuer and
subject, claim-to-membership mappings synced at every sign-in (docs/sso.md)."""
