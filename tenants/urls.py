"""Page URLs for tenancy: the user's API tokens."""

from django.urls import path

from tenants import pages

urlpatterns = [
    path("tokens/", pages.tokens, name="tokens"),
    path("tokens/<int:token_id>/revoke/", pages.token_revoke_page, name="token-revoke"),
]
