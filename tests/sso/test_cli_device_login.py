"""`lora-portal login --sso` by the device authorization grant (RFC 8628): a real CLI process
against a real provider process that offers it (`--device-grant`), the person approving or
denying at the provider's own page. Each test waits on what the CLI prints or on its exit,
never on a clock of its own."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from django.contrib.auth import get_user_model

from core.audit_models import AuditEvent
from tenants.models import ApiToken, Membership
from tenants.services.tokens import token_authenticate
from tenants.sso.models import SsoIdentity, SsoMapping
from tests.client.conftest import CLIENT_SRC
from tests.fixtures.oidc_provider import CLI_CLIENT_ID, DEVICE_INTERVAL_SECONDS
from tests.sso.flow import authorize_at_provider, decide_device_code

if TYPE_CHECKING:  # not imported at run time: pytest would try to collect a class named Test*
    from tests.fixtures.oidc_provider import TestProvider

pytestmark = pytest.mark.django_db(transaction=True)
CODE_LINE = re.compile(r"^To sign in, open (\S+) and enter the code (\S+)\.$")
LOOPBACK_PROMPT = "Sign in at your identity provider: "
SLOW_DOWN_LINE = "The identity provider asked to poll more slowly: every "
WAIT_FOR_EXIT_SECONDS = 60


@dataclass
class LoginProcess:
    """A running `lora-portal login --sso --json`; its stderr read line by line as it comes."""

    proc: subprocess.Popen[str]
    config: Path
    seen: list[str]

    def line_starting(self, prefix: str) -> str:
        assert self.proc.stderr is not None
        while True:
            line = self.proc.stderr.readline()
            assert line, f"the CLI ended before printing {prefix!r}; it printed {self.seen}"
            self.seen.append(line.rstrip("\n"))
            if line.startswith(prefix):
                return line.rstrip("\n")

    def code(self) -> tuple[str, str]:
        """The verification URI and the user code the CLI printed."""
        found = CODE_LINE.match(self.line_starting("To sign in, open "))
        assert found, self.seen
        return found.group(1), found.group(2)

    def finish(self) -> tuple[int, dict[str, Any], str]:
        out, err = self.proc.communicate(timeout=WAIT_FOR_EXIT_SECONDS)
        return self.proc.returncode, json.loads(out), "\n".join(self.seen) + err

    def saved_token(self) -> str:
        return str(json.loads(self.config.read_text())["token"])


@pytest.fixture
def login(live_server, tmp_path) -> Iterator[Any]:
    started: list[LoginProcess] = []

    def run(*options: str) -> LoginProcess:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("LORA_PORTAL_")},
            "LORA_PORTAL_URL": live_server.url,
            "XDG_CONFIG_HOME": str(tmp_path),
            "PYTHONPATH": str(CLIENT_SRC),
        }
        command = [sys.executable, "-m", "lora_portal_client", "login", "--sso", "--no-browser"]
        proc = subprocess.Popen(
            [*command, "--tenant", "acme", "--scopes", "read", "--json", *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        started.append(LoginProcess(proc, tmp_path / "lora-portal" / "config.json", []))
        return started[-1]

    yield run
    for each in started:
        each.proc.kill()
        each.proc.wait()


def _map_lou(world: Any, provider: TestProvider) -> None:
    """A person at the provider whose group maps to maintainer of acme."""
    SsoMapping.objects.create(
        provider="testidp", claim="groups", value="ml-team", tenant=world.acme, role="maintainer"
    )
    provider.user("lou", groups=["ml-team"])


def _nothing_created() -> None:
    assert not SsoIdentity.objects.exists()
    assert not get_user_model().objects.filter(username="lou").exists()
    assert not ApiToken.objects.exists()


def test_approved_at_the_provider_the_cli_saves_a_working_token_with_the_mapped_memberships(
    login, sso_device, world
):
    _map_lou(world, sso_device)
    cli = login()
    uri, code = cli.code()
    assert uri == f"{sso_device.url}/o/device/"
    with httpx.Client() as browser:
        decide_device_code(uri, code, "lou", browser, approve=True)
    status, out, err = cli.finish()
    assert status == 0, err
    assert out["username"] == "lou"
    token = token_authenticate(cli.saved_token())
    assert token is not None and token.user.username == "lou" and token.tenant == world.acme
    assert token.scopes == ["read"]
    membership = Membership.objects.get(user=token.user, tenant=world.acme)
    assert (membership.role, membership.source) == ("maintainer", "sso")
    identity = SsoIdentity.objects.get(user=token.user)
    assert identity.issuer == sso_device.issuer
    assert LOOPBACK_PROMPT not in err
    assert SLOW_DOWN_LINE not in err  # it kept the announced interval: the provider says if not


def test_denied_at_the_provider_the_cli_says_so_and_nothing_is_created(login, sso_device, world):
    _map_lou(world, sso_device)
    cli = login()
    uri, code = cli.code()
    with httpx.Client() as browser:
        decide_device_code(uri, code, "lou", browser, approve=False)
    status, out, err = cli.finish()
    assert status == 5, err  # authentication: no token
    assert out["error"]["code"] == "sso.denied"
    assert not cli.config.exists()
    _nothing_created()


def test_a_code_that_expires_at_the_provider_ends_the_login_with_code_expired(
    login, sso_device, world
):
    _map_lou(world, sso_device)
    cli = login()
    _, code = cli.code()
    sso_device.device_code(code, expire=True)
    status, out, err = cli.finish()
    assert status == 3, err  # ran out of time, as `wait`
    assert out["error"]["code"] == "sso.code_expired"
    _nothing_created()


def test_nobody_approving_within_the_timeout_ends_the_login_with_timeout(login, sso_device, world):
    cli = login("--sso-timeout", "2")
    cli.code()
    status, out, err = cli.finish()
    assert status == 3, err
    assert out["error"]["code"] == "sso.timeout"
    _nothing_created()


def test_slow_down_from_the_provider_is_honoured(login, sso_device, world):
    """The provider raises the code's interval by 5 s, as one under load does: a poll sooner than
    that is answered slow_down (again and again, until the code expires), so the sign-in only
    completes if the CLI waits the 5 s more that RFC 8628 asks, for every later poll."""
    _map_lou(world, sso_device)
    cli = login("--sso-timeout", "20")
    uri, code = cli.code()
    slower = DEVICE_INTERVAL_SECONDS + 5
    assert sso_device.device_code(code, interval=slower)["interval"] == slower
    assert cli.line_starting(SLOW_DOWN_LINE) == f"{SLOW_DOWN_LINE}{slower} s now."
    with httpx.Client() as browser:
        decide_device_code(uri, code, "lou", browser, approve=True)
    status, out, err = cli.finish()
    assert status == 0, err
    assert err.count(SLOW_DOWN_LINE) == 1
    assert token_authenticate(cli.saved_token()) is not None


def test_the_portal_checks_a_device_grant_id_token_as_any_other(login, sso_device, world):
    _map_lou(world, sso_device)
    sso_device.tamper_next_id_token("audience")
    cli = login()
    uri, code = cli.code()
    with httpx.Client() as browser:
        decide_device_code(uri, code, "lou", browser, approve=True)
    status, out, err = cli.finish()
    assert status == 5, err
    assert out["error"]["code"] == "sso.wrong_audience"
    _nothing_created()
    refused = AuditEvent.objects.get(action="sso.refused")
    assert refused.after == {
        "code": "sso.wrong_audience",
        "provider": "testidp",
        "what": "cli",
        "client_ip": "127.0.0.1",
        "failures": 1,
    }


def test_a_provider_without_the_device_endpoint_gets_the_loopback_redirect(login, sso, world):
    _map_lou(world, sso)
    discovery = httpx.get(f"{sso.issuer}/.well-known/openid-configuration").json()
    assert "device_authorization_endpoint" not in discovery
    cli = login()
    line = cli.line_starting(LOOPBACK_PROMPT)
    with httpx.Client() as browser:
        back = authorize_at_provider(line.removeprefix(LOOPBACK_PROMPT).strip(), "lou", browser)
        assert browser.get(back).status_code == 200
    status, out, err = cli.finish()
    assert status == 0, err
    assert out["username"] == "lou"
    assert "enter the code" not in err


def test_sso_flow_loopback_forces_the_redirect_where_the_device_grant_is_offered(
    login, sso_device, world
):
    _map_lou(world, sso_device)
    cli = login("--sso-flow", "loopback")
    line = cli.line_starting(LOOPBACK_PROMPT)
    with httpx.Client() as browser:
        back = authorize_at_provider(line.removeprefix(LOOPBACK_PROMPT).strip(), "lou", browser)
        assert browser.get(back).status_code == 200
    status, out, err = cli.finish()
    assert status == 0, err
    assert token_authenticate(cli.saved_token()) is not None


def test_sso_flow_device_where_the_provider_does_not_offer_it_is_a_usage_error(login, sso, world):
    cli = login("--sso-flow", "device")
    status, out, err = cli.finish()
    assert status == 4, err
    assert out["error"]["code"] == "sso.no_device_grant"


def test_the_provider_answers_each_poll_as_rfc_8628_says(sso_device, world):
    """What the CLI relies on, asked of the provider directly: pending, slow_down for a poll
    sooner than the code's interval, access_denied, expired_token. The interval is set to 0
    (or raised) at the provider so that nothing here waits."""
    _map_lou(world, sso_device)
    discovery = httpx.get(f"{sso_device.issuer}/.well-known/openid-configuration").json()

    def start() -> dict[str, Any]:
        answer = httpx.post(
            discovery["device_authorization_endpoint"],
            data={"client_id": CLI_CLIENT_ID, "scope": "openid"},
        )
        assert answer.status_code == 200, answer.text
        started = dict(answer.json())
        sso_device.device_code(started["user_code"], interval=0)
        return started

    def poll(started: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            discovery["token_endpoint"],
            data={
                "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
                "device_code": started["device_code"],
                "client_id": CLI_CLIENT_ID,
            },
        )

    pending = start()
    assert poll(pending).json() == {"error": "authorization_pending"}
    sso_device.device_code(pending["user_code"], interval=60)
    assert poll(pending).json() == {"error": "slow_down"}
    denied = start()
    with httpx.Client() as browser:
        decide_device_code(
            denied["verification_uri"], denied["user_code"], "lou", browser, approve=False
        )
    assert poll(denied).json() == {"error": "access_denied"}
    expired = start()
    sso_device.device_code(expired["user_code"], expire=True)
    assert poll(expired).json() == {"error": "expired_token"}
    approved = start()
    with httpx.Client() as browser:
        decide_device_code(
            approved["verification_uri"], approved["user_code"], "lou", browser, approve=True
        )
    answer = poll(approved)
    assert answer.status_code == 200 and "id_token" in answer.json()
    assert poll(approved).json() == {"error": "expired_token"}  # a code gives one token
