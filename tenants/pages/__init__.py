"""Server-rendered tenancy pages: a user's own API tokens, a tenant's signing keys and signature
policy, the platform admins' tenants and users. (The page kit every app's pages use is
tenants/pagekit.py and tenants/pageforms.py; single sign-on's and notifications' pages are in
their packages, tenants/sso/pages/ and tenants/notifications/pages.py.)"""
