"""The engine boundary on the portal's side (docs/security.md, class 5): an engine's key goes
only to that engine, only platform admins say where an engine lives, and outside debug the
portal refuses to run without per-engine keys (a deploy check) or to call an engine it has no
key for."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.checks import run_checks

from core.audit_models import AuditEvent
from tests.paths import REPO
from workers.models import Engine
from workers.services.engines import engines_probe_all

pytestmark = pytest.mark.django_db

MINE = "m" * 40
SHARED = "s" * 40


class RecordingEngine(ThreadingHTTPServer):
    """A loopback HTTP server that answers like a healthy engine and records every request;
    `guarded`: like an engine started with its key, 401 without one (health excepted)."""

    def __init__(self, *, guarded: bool = True) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.guarded = guarded
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.seen.append((self.path, headers))  # type: ignore[attr-defined]
        keyless = "authorization" not in headers and "x-portal-engine-key" not in headers
        refuse = self.server.guarded and keyless and self.path != "/health"  # type: ignore[attr-defined]
        body = b'{"registered": [], "gpu_observed": false}'
        self.send_response(401 if refuse else 200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recording_engines() -> Iterator[dict[str, RecordingEngine]]:
    servers = {
        "mine": RecordingEngine(),
        "stranger": RecordingEngine(),
        "open": RecordingEngine(guarded=False),
    }
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers.values()]
    for thread in threads:
        thread.start()
    yield servers
    for server in servers.values():
        server.shutdown()
        server.server_close()


def _engine(world, name: str, url: str) -> Engine:
    return Engine.objects.create(
        name=name,
        base_model=world.base,
        url=url,
        served_model_name="tiny",
        adapter_root="/srv/adapters",
    )


def test_the_prober_sends_each_engine_only_its_own_key(world, settings, recording_engines):
    settings.PORTAL_ENGINE_KEY = SHARED  # a development fallback: ignored outside debug
    settings.PORTAL_ENGINE_KEYS = {"mine": MINE}
    _engine(world, "mine", recording_engines["mine"].url)
    _engine(world, "stranger", recording_engines["stranger"].url)

    result = engines_probe_all()

    assert result["mine"] == "up"
    mine_seen = recording_engines["mine"].seen
    keyed = [h for _, h in mine_seen if "authorization" in h or "x-portal-engine-key" in h]
    assert keyed and all(
        h.get("authorization") == f"Bearer {MINE}" and h.get("x-portal-engine-key") == MINE
        for h in keyed
    )
    # The guard probe sends no key at all (it checks the engine refuses such callers).
    assert {p for p, h in mine_seen if h not in keyed} == {"/v1/models", "/adapters"}
    # No key for it: nothing is sent at all, and it stays out of service with a reason.
    assert recording_engines["stranger"].seen == []
    stranger = Engine.objects.get(name="stranger")
    assert stranger.state == "down" and stranger.last_error.startswith("engine.key_missing: ")
    assert AuditEvent.objects.filter(
        action="engine.state", object_id="stranger", after__state="down"
    ).exists()


def test_an_engine_that_answers_without_its_key_is_kept_out_of_service(
    world, settings, recording_engines
):
    settings.PORTAL_ENGINE_KEYS = {"open": MINE}
    _engine(world, "open", recording_engines["open"].url)
    assert engines_probe_all()["open"].startswith("engine.unguarded: GET /v1/models")
    engine = Engine.objects.get(name="open")
    assert engine.state == "down" and "VLLM_API_KEY" in engine.last_error


def test_in_debug_the_shared_key_serves_a_local_engine(world, settings, recording_engines):
    settings.DEBUG = True
    settings.PORTAL_ENGINE_KEY = SHARED
    settings.PORTAL_ENGINE_KEYS = {}
    _engine(world, "stranger", recording_engines["stranger"].url)
    assert engines_probe_all()["stranger"] == "up"
    assert recording_engines["stranger"].seen[0][1]["x-portal-engine-key"] == SHARED


# --- where an engine lives: platform admins only ---

ENGINE = "/api/v1/engines/cpu-1/"


@pytest.fixture
def cpu1(world) -> Engine:
    return _engine(world, "cpu-1", "http://10.0.0.5:8000")


@pytest.mark.parametrize(
    "body", [{"url": "http://attacker.example:8000"}, {"adapter_root": "/home/olga/adapters"}]
)
def test_an_operator_cannot_move_an_engine(world, cpu1, body):
    client = world.token_client("olga", ["admin"])
    response = client.patch(ENGINE, body, format="json")
    assert response.status_code == 403, response.json()
    error = response.json()["error"]
    assert error["code"] == "engine.location" and "platform admin" in error["message"]
    cpu1.refresh_from_db()
    assert (cpu1.url, cpu1.adapter_root) == ("http://10.0.0.5:8000", "/srv/adapters")
    assert not AuditEvent.objects.filter(action="engine.update").exists()


def test_an_operator_cannot_place_a_new_engine(world):
    response = world.token_client("olga", ["admin"]).post(
        "/api/v1/engines/",
        {
            "name": "mine",
            "base_model": world.base.name,
            "url": "http://attacker.example:8000",
            "served_model_name": "tiny",
            "adapter_root": "/srv/adapters",
        },
        format="json",
    )
    assert response.status_code == 403, response.json()
    assert response.json()["error"]["code"] == "engine.location"
    assert not Engine.objects.filter(name="mine").exists()


def test_an_operator_still_tunes_an_engine_and_sends_back_its_url(world, cpu1):
    response = world.token_client("olga", ["admin"]).patch(
        ENGINE, {"max_loras": 3, "max_cpu_loras": 6, "url": cpu1.url}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert Engine.objects.get(pk=cpu1.pk).max_loras == 3


def test_a_platform_admin_moves_an_engine_audited(world, cpu1):
    response = world.token_client("adam", ["admin"]).patch(
        ENGINE, {"url": "http://10.0.0.6:8000"}, format="json"
    )
    assert response.status_code == 200, response.json()
    (event,) = AuditEvent.objects.filter(action="engine.update", object_id="cpu-1")
    assert event.before == {"url": "http://10.0.0.5:8000"}
    assert event.after == {"url": "http://10.0.0.6:8000"}


def test_a_platform_admins_tenant_bound_token_cannot_move_an_engine(world, cpu1):
    response = world.token_client("adam", ["admin"], tenant=world.acme).patch(
        ENGINE, {"url": "http://10.0.0.6:8000"}, format="json"
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "token.tenant_bound"


# --- the deploy check ---


def _check_ids(settings) -> set[str]:
    return {m.id for m in run_checks(include_deployment_checks=True, tags=["security"]) if m.id}


def test_the_deploy_check_wants_a_key_for_every_registered_engine(world, settings, cpu1):
    settings.PORTAL_ENGINE_KEY = ""
    settings.PORTAL_ENGINE_KEYS = {"other": "o" * 40}
    assert "workers.E005" in _check_ids(settings)
    settings.PORTAL_ENGINE_KEYS = {"other": "o" * 40, "cpu-1": "c" * 40}
    assert not {i for i in _check_ids(settings) if i.startswith("workers.")}


def test_the_deploy_check_refuses_short_shared_and_fallback_keys(world, settings):
    settings.PORTAL_ENGINE_KEY = SHARED
    settings.PORTAL_ENGINE_KEYS = {"a": "short", "b": "k" * 40, "c": "k" * 40}
    ids = _check_ids(settings)
    assert {"workers.E001", "workers.E003", "workers.E004"} <= ids
    settings.DEBUG = True
    assert not {i for i in _check_ids(settings) if i.startswith("workers.")}


def test_manage_py_check_deploy_fails_without_engine_keys(tmp_path):
    """As an operator runs it before starting the portal (production settings, no keys)."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PORTAL_ENGINE_KEY")},
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "DJANGO_DEBUG": "0",
        "SECRET_KEY": "prod-like-" + "k3y" * 20,
        "ALLOWED_HOSTS": "portal.example.com",
        "PORTAL_VAR_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "ERROR"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "workers.E002" in result.stderr + result.stdout
