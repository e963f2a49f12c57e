"""Mappings kept by platform admins (API and page), and the dry run: what a set of claims would
give, and what would change for someone who signed in before. Nothing is saved by a dry run."""

from __future__ import annotations

import pytest

from core.audit_models import AuditEvent
from tenants.models import Membership
from tenants.sso.models import SsoMapping
from tests.sso.flow import sign_in

pytestmark = pytest.mark.django_db

MAPPINGS = "/api/v1/sso/providers/testidp/mappings/"
DRY_RUN = "/api/v1/sso/providers/testidp/dry-run/"


def test_admins_add_mappings_and_bad_ones_are_refused(client, world, sso):
    client.force_login(world.users["adam"])
    made = client.post(
        MAPPINGS,
        {"claim": "groups", "value": "ml-team", "tenant": "acme", "role": "owner"},
        content_type="application/json",
    )
    assert made.status_code == 201, made.json()
    assert client.get(MAPPINGS).json() == [made.json()]
    for bad, code in [
        ({"claim": "groups", "value": "x", "tenant": "acme"}, "sso.bad_mapping"),
        ({"claim": "groups", "value": "x", "platform_role": "pope"}, "sso.bad_mapping"),
        (
            {
                "claim": "groups",
                "value": "x",
                "tenant": "acme",
                "role": "viewer",
                "platform_role": "reviewer",
            },
            "sso.bad_mapping",
        ),
        (
            {"claim": "groups", "value": "x", "tenant": "nowhere", "role": "viewer"},
            "tenant.not_found",
        ),
        (
            {"claim": "groups", "value": "ml-team", "tenant": "acme", "role": "owner"},
            "sso.mapping_exists",
        ),
    ]:
        refused = client.post(MAPPINGS, bad, content_type="application/json")
        assert refused.json()["error"]["code"] == code, (bad, refused.json())
    assert SsoMapping.objects.count() == 1
    assert AuditEvent.objects.filter(action="sso.mapping.create").count() == 1
    other = client.get("/api/v1/sso/providers/elsewhere/mappings/")
    assert other.status_code == 404 and other.json()["error"]["code"] == "sso.unknown_provider"


def test_the_dry_run_shows_what_would_change_for_a_person(client, world, sso):
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="viewer"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-leads", tenant=world.acme, role="owner"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="globex", tenant=world.globex, role="viewer"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="audit", platform_role="auditor"
    )
    sub = sso.user("fay", groups=["ml-team", "globex"])
    sign_in(client, "fay")
    client.logout()
    client.force_login(world.users["adam"])
    claims = {"sub": sub, "groups": ["ml-leads", "audit"]}
    answer = client.post(DRY_RUN, {"claims": claims}, content_type="application/json").json()
    assert answer["user"] == "fay"
    assert answer["memberships"] == [{"tenant": "acme", "role": "owner"}]
    assert answer["platform_roles"] == ["auditor"]
    assert answer["changes"] == [
        {"change": "change", "tenant": "acme", "before": "viewer", "after": "owner"},
        {"change": "remove", "tenant": "globex", "before": "viewer"},
        {"change": "add", "platform_role": "auditor", "after": "auditor"},
    ]
    assert Membership.objects.filter(user__username="fay", source="sso").count() == 2  # unchanged
    nowhere = client.post(DRY_RUN, {"claims": {"groups": ["x"]}}, content_type="application/json")
    assert nowhere.json()["maps_nowhere"] is True and nowhere.json()["user"] is None


def test_the_page_adds_a_mapping_and_runs_a_dry_run(client, world, sso):
    client.force_login(world.users["adam"])
    page = client.post(
        "/platform/sso/",
        {"provider": "testidp", "claim": "groups", "value": "ops", "platform_role": "operator"},
    )
    assert page.status_code == 302
    shown = client.get("/platform/sso/")
    assert b"platform role operator" in shown.content
    dry = client.post(
        "/platform/sso/dry-run/", {"provider": "testidp", "claims": '{"groups": ["ops"]}'}
    )
    assert dry.context["dry_run"]["platform_roles"] == ["operator"]
    bad = client.post("/platform/sso/dry-run/", {"provider": "testidp", "claims": "{nope"})
    assert bad.status_code == 400 and b"not JSON" in bad.content


def test_make_runs_demo_provider_gets_its_mappings(settings, world):
    from portal.demo import DEMO_SSO_MAPPINGS, seed_demo_sso

    assert seed_demo_sso() is False  # no demo provider configured: nothing
    settings.OIDC_PROVIDERS = [
        {
            "name": "demo-idp",
            "issuer": "http://127.0.0.1:8300/o",
            "client_id": "lora-portal",
            "client_secret_env": "DEMO_IDP_CLIENT_SECRET",
        }
    ]
    assert seed_demo_sso() and seed_demo_sso()  # again at the next start: no duplicates
    assert SsoMapping.objects.filter(provider="demo-idp").count() == len(DEMO_SSO_MAPPINGS)


def test_a_dry_run_as_a_test_user_signs_nobody_in(client, world, sso):
    """The admin signs in at the provider as a test user (asked again: prompt=login); the page
    shows what that person's claims give; no account is made and the admin stays who they are."""
    import httpx

    from tenants.sso.models import SsoIdentity
    from tests.sso.flow import authorize_at_provider, callback_path

    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ops", platform_role="operator"
    )
    sso.user("tess", groups=["ops"])
    assert client.get("/sso/testidp/start/?dry_run=1").status_code == 403  # admins only
    client.force_login(world.users["adam"])
    started = client.get("/sso/testidp/start/?dry_run=1")
    assert "prompt=login" in started["Location"]
    with httpx.Client() as browser:
        back = authorize_at_provider(started["Location"], "tess", browser)
    page = client.get(callback_path(back))
    assert page.status_code == 200
    assert page.context["dry_run"]["platform_roles"] == ["operator"]
    assert not SsoIdentity.objects.exists()
    assert page.wsgi_request.user.username == "adam"
    assert AuditEvent.objects.filter(action="sso.dry_run").exists()


def test_the_admin_stays_signed_in_after_a_dry_run(client, world, sso):
    """The test user's provider and subject never reach the admin's session: the next request
    is still the admin's, for an admin signed in with a password and for one signed in
    through the provider alike."""
    import httpx

    from tenants.sso import oidc
    from tests.sso.flow import authorize_at_provider, callback_path

    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ops", platform_role="operator"
    )
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="admins", platform_role="platform-admin"
    )
    sso.user("tess", groups=["ops"])
    sso.user("ada", groups=["admins"])

    def dry_run_as_tess() -> None:
        started = client.get("/sso/testidp/start/?dry_run=1")
        with httpx.Client() as browser:
            back = authorize_at_provider(started["Location"], "tess", browser)
        assert client.get(callback_path(back)).status_code == 200

    client.force_login(world.users["adam"])
    dry_run_as_tess()
    assert oidc.SESSION_PROVIDER not in client.session
    after = client.get("/")
    assert after.status_code == 200 and after.wsgi_request.user.username == "adam"

    client.logout()
    sign_in(client, "ada")
    own = client.session[oidc.SESSION_SUBJECT]
    dry_run_as_tess()
    assert client.session[oidc.SESSION_SUBJECT] == own
    after = client.get("/")
    assert after.status_code == 200 and after.wsgi_request.user.username == "ada"
    assert not AuditEvent.objects.filter(action="sso.session_ended").exists()


def test_a_mapping_on_email_applies_only_when_the_provider_verified_it(client, world, sso):
    """At some providers a person types any address into their own profile: a mapping on
    `email` gives its role only when the provider marks the address verified."""
    SsoMapping.objects.create(
        provider="testidp", claim="email", value="ceo@acme.test", tenant=world.acme, role="owner"
    )
    sso.user("eve", groups=[], email="ceo@acme.test", email_verified=False)
    refused = sign_in(client, "eve")
    assert refused.status_code == 403 and refused.context["code"] == "sso.maps_nowhere"
    assert not Membership.objects.filter(tenant=world.acme, user__username="eve").exists()
    client.force_login(world.users["adam"])
    dry = client.post(
        DRY_RUN,
        {"claims": {"email": "ceo@acme.test", "email_verified": False}},
        content_type="application/json",
    ).json()
    assert dry["maps_nowhere"] is True and dry["unverified"] == ["email=ceo@acme.test"]
    page = client.post(
        "/platform/sso/dry-run/",
        {"provider": "testidp", "claims": '{"email": "ceo@acme.test", "email_verified": "true"}'},
    )
    assert b"did not mark them verified: email=ceo@acme.test" in page.content
    client.logout()
    sso.user("eve", groups=[], email="ceo@acme.test", email_verified=True)
    assert sign_in(client, "eve").status_code == 302
    assert Membership.objects.filter(tenant=world.acme, user__username="eve", role="owner").exists()


def test_claims_a_person_sets_and_nobody_verifies_cannot_be_mapped(client, world, sso):
    client.force_login(world.users["adam"])
    for claim in ("preferred_username", "name", "nickname"):
        refused = client.post(
            MAPPINGS,
            {"claim": claim, "value": "boss", "tenant": "acme", "role": "owner"},
            content_type="application/json",
        )
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "sso.unverifiable_claim"
    assert not SsoMapping.objects.exists()
    # A row made before the rule (or by hand) gives nothing either.
    SsoMapping.objects.create(
        provider="testidp",
        claim="preferred_username",
        value="boss",
        tenant=world.acme,
        role="owner",
    )
    sso.user("boss", groups=[])
    client.logout()
    assert sign_in(client, "boss").status_code == 403
    shown = client.get("/login/")
    assert shown.status_code == 200
    client.force_login(world.users["adam"])
    page = client.get("/platform/sso/")
    assert b"applies only when the provider marks the value verified" in page.content
