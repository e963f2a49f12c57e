"""`make run`'s demo identity provider: the test provider with a portal client, the CLI's
client and three people (README, docs/sso.md). Idempotent: run at every start."""

from __future__ import annotations

import os

from django.contrib.auth.models import Group, User
from oauth2_provider.models import Application

# Who signs in at the demo provider, with which groups (portal/demo.py maps them).
DEMO_PEOPLE = {
    "dana": ["acme-maintainers", "reviewers"],
    "erin": ["globex-viewers"],
    "kai": ["kitchen"],  # maps nowhere: the portal refuses the sign-in, with its page
}


def seed() -> None:
    password = os.environ.get("DEMO_PASSWORD", "lora-portal-demo")
    Application.objects.update_or_create(
        client_id="lora-portal",
        defaults={
            "name": "LoRA Portal (demo)",
            "client_secret": os.environ.get("DEMO_IDP_CLIENT_SECRET", "demo-idp-client-secret"),
            "client_type": Application.CLIENT_CONFIDENTIAL,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": "http://127.0.0.1/sso/callback/",  # any port on loopback
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,
            "hash_client_secret": False,
        },
    )
    Application.objects.update_or_create(
        client_id="lora-portal-cli",
        defaults={
            "name": "lora-portal CLI (demo)",
            "client_type": Application.CLIENT_PUBLIC,
            "authorization_grant_type": Application.GRANT_AUTHORIZATION_CODE,
            "redirect_uris": "http://127.0.0.1/callback",
            "algorithm": Application.RS256_ALGORITHM,
            "skip_authorization": True,
        },
    )
    for username, groups in DEMO_PEOPLE.items():
        user, created = User.objects.get_or_create(
            username=username, defaults={"email": f"{username}@demo.example"}
        )
        if created:
            user.set_password(password)
            user.save()
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])
