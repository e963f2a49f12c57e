"""The engine boundary (docs/security.md, class 5): vLLM 0.32's own app, built as the launcher
starts it (runtime LoRA updating on, the portal plugin, the key), answers 401 on every route but
liveness when the caller has no key.

No engine is started: vLLM's app is built by its own `build_app` in the engine's interpreter and
called in process, so the guard (a middleware) answers before any handler needs the engine.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from engine.launcher import ENGINE_PYTHON, REPO_ROOT

KEY = "k-" + "0123456789abcdef" * 2

BUILD_AND_CALL = r"""
import json, re, sys
from fastapi.testclient import TestClient
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.entrypoints.launchers.cli_args import make_arg_parser
from vllm.entrypoints.launchers.app import build_app

key = sys.argv[1]
args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model", "unused"])
app = build_app(args, ("generate",))
client = TestClient(app, raise_server_exceptions=False)
headers = {"with_bearer": {"Authorization": f"Bearer {key}"},
           "with_header": {"X-Portal-Engine-Key": key},
           "wrong": {"Authorization": "Bearer wrong", "X-Portal-Engine-Key": "wrong"},
           "none": {}}
out = {}
for route in app.routes:
    path = re.sub(r"\{[^}]+\}", "x", getattr(route, "path", ""))
    for method in sorted(getattr(route, "methods", None) or ()):
        for label in ("none", "wrong"):
            answer = client.request(method, path, headers=headers[label], json={})
            out[f"{label} {method} {path}"] = answer.status_code
# With the key the guard lets the request through to its handler (which, with no engine behind
# it, fails in its own way: anything but 401).
for label in ("with_bearer", "with_header"):
    for method, path in (("GET", "/portal/residency"), ("POST", "/adapters"),
                         ("GET", "/metrics"), ("POST", "/tokenize")):
        out[f"{label} {method} {path}"] = client.request(
            method, path, headers=headers[label], json={}).status_code
print(json.dumps(out))
"""


def _statuses(**env: str) -> dict[str, int]:
    if not ENGINE_PYTHON.exists():
        pytest.fail(f"{ENGINE_PYTHON} is missing: run engine/setup_venv.sh (make test does)")
    inherited = ("VIRTUAL_ENV", "VLLM_API_KEY", "PORTAL_ENGINE_KEY")
    run_env = {
        **{k: v for k, v in os.environ.items() if k not in inherited},
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",  # as engine/launcher.py starts engines
        "VLLM_NO_USAGE_STATS": "1",
        **env,
    }
    result = subprocess.run(
        [str(ENGINE_PYTHON), "-c", BUILD_AND_CALL, KEY],
        cwd=REPO_ROOT,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


LIVENESS = {"GET /health", "GET /ping", "GET /version", "HEAD /health", "HEAD /ping"}
RUNTIME_LORA = ("POST /v1/load_lora_adapter", "POST /v1/unload_lora_adapter", "POST /adapters",
                "DELETE /adapters/x")  # fmt: skip


@pytest.fixture(scope="module")
def guarded() -> dict[str, int]:
    """The app as the launcher starts an engine with a key: plugin key and vLLM's api key."""
    return _statuses(VLLM_PLUGINS="portal", PORTAL_ENGINE_KEY=KEY, VLLM_API_KEY=KEY)


def test_every_route_but_liveness_refuses_a_caller_without_the_key(guarded):
    refused = {
        call: status
        for call, status in guarded.items()
        if call.startswith(("none ", "wrong ")) and call.split(" ", 1)[1] not in LIVENESS
    }
    assert len(refused) > 40  # every route vLLM 0.32 serves, twice (no key, a wrong key)
    assert {call for call, status in refused.items() if status != 401} == set()
    for call in RUNTIME_LORA:
        assert guarded[f"none {call}"] == 401 and guarded[f"wrong {call}"] == 401
    for route in ("POST /portal/load", "POST /portal/evict", "POST /invocations"):
        assert guarded[f"none {route}"] == 401


def test_liveness_answers_without_the_key(guarded):
    assert guarded["none GET /ping"] != 401 and guarded["none GET /version"] == 200


@pytest.mark.parametrize("how", ["with_bearer", "with_header"])
def test_the_key_opens_every_route(guarded, how):
    calls = {call: status for call, status in guarded.items() if call.startswith(how)}
    assert len(calls) == 4 and all(status != 401 for status in calls.values()), calls


def test_vllms_api_key_alone_leaves_the_runtime_lora_routes_open():
    """Why the plugin guards: vLLM's --api-key covers /v1/... only. Without the plugin a caller
    with no key still reaches the adapter-loading handler through /adapters."""
    stock = _statuses(VLLM_PLUGINS="", VLLM_API_KEY=KEY)
    assert stock["none POST /v1/load_lora_adapter"] == 401
    assert stock["none POST /adapters"] != 401
    assert stock["none POST /invocations"] != 401
