"""The plugin's verified load, unpin, load counters and GPU-slot view against REAL CPU engines.

Adapters are staged under the engine's adapter root as workers do; the plugin builds the path
from the name. Greedy replies that differ from the base model's prove the adapter served them.
The last tests drive the routes in the engine's own interpreter with a stand-in engine client,
for what a running test engine cannot show (an engine without an adapter root), and check
files.py's change detection directly.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from engine.launcher import ENGINE_PYTHON, REPO_ROOT
from tests.fixtures.engines import EngineHandle
from workers.vllm_client import EngineError, VLLMClient, file_error_code, plugin_error_code

pytestmark = pytest.mark.engine

PROMPT = [{"role": "user", "content": "Hello there, how are you?"}]
GREEDY = {"temperature": 0, "max_tokens": 8}
WEIGHTS = "adapter_model.safetensors"
CONFIG = "adapter_config.json"

Stage = Callable[..., tuple[str, str]]


def _manifest(directory: Path) -> list[dict[str, Any]]:
    return [
        {
            "name": f.name,
            "size": f.stat().st_size,
            "sha256": hashlib.sha256(f.read_bytes()).hexdigest(),
        }
        for f in sorted(Path(directory).iterdir())
    ]


def _text(reply: dict) -> str:
    return str(reply["choices"][0]["message"]["content"])


async def _models(engine: VLLMClient) -> set[str]:
    return {card["id"] for card in await engine.list_models()}


async def _refused(engine: VLLMClient, name: str, manifest: Any) -> EngineError:
    with pytest.raises(EngineError) as info:
        await engine.load_verified(name, manifest)
    return info.value


async def test_a_verified_load_registers_the_adapter_and_it_serves(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r8")
    async with engine_a.client() as engine:
        try:
            loaded = await engine.load_verified(name, _manifest(Path(path)))
            assert loaded["name"] == name
            assert (loaded["loaded"], loaded["already_loaded"], loaded["verified"]) == (
                True,
                False,
                True,
            )
            assert isinstance(loaded["lora_int_id"], int)
            assert isinstance(loaded["load_ms"], float)

            cards = {card["id"]: card for card in await engine.list_models()}
            assert cards[name]["root"] == path  # the path the plugin built: <root>/<name>
            base = await engine.chat(engine_a.served_model_name, PROMPT, **GREEDY)
            tuned = await engine.chat(name, PROMPT, **GREEDY)
            assert _text(base) != _text(tuned)

            residency = await engine.residency()
            assert name in residency["resident"]  # the load read the weights into the cache
            assert residency["loads"][name] == 1
            assert residency["load_ms"][name] == loaded["load_ms"]
        finally:
            await engine.evict(name)


def _break_header(path: Path) -> None:
    # One byte, same size: the first byte of the safetensors JSON header. Were vLLM to read the
    # file, it would refuse it with "Error while deserializing header" (500), not 409.
    data = bytearray(path.read_bytes())
    data[8] = ord("X")
    path.write_bytes(bytes(data))


async def test_a_tampered_file_is_refused_before_the_engine_reads_it(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r16")
    manifest = _manifest(Path(path))
    _break_header(Path(path) / WEIGHTS)
    async with engine_a.client() as engine:
        before = await engine.residency()
        error = await _refused(engine, name, manifest)
        assert (error.status, error.permanent) == (409, True)
        assert file_error_code(error) == "files.sha256_mismatch"
        assert WEIGHTS in error.engine_reason

        after = await engine.residency()
        assert name not in await _models(engine)
        assert name not in after["loads"]
        assert after["resident_ids"] == before["resident_ids"]  # nothing new in the cache

        # Control: the engine itself would have read and refused these bytes differently.
        with pytest.raises(EngineError) as stock:
            await engine.load_adapter(name, path)
        assert stock.value.status == 500
        assert "deserializing header" in stock.value.engine_reason


def _extra(directory: Path, outside: Path) -> None:
    (directory / "notes.txt").write_text("not part of the version")


def _missing(directory: Path, outside: Path) -> None:
    (directory / CONFIG).unlink()


def _grown(directory: Path, outside: Path) -> None:
    with open(directory / WEIGHTS, "ab") as weights:
        weights.write(b"\0")


def _symlinked_file(directory: Path, outside: Path) -> None:
    # Same bytes as the manifest says, but through a symlink: still refused.
    target = outside / WEIGHTS
    (directory / WEIGHTS).rename(target)
    (directory / WEIGHTS).symlink_to(target)


def _symlinked_dir(directory: Path, outside: Path) -> None:
    real = outside / "real"
    shutil.move(directory, real)
    directory.symlink_to(real, target_is_directory=True)


def _not_staged(directory: Path, outside: Path) -> None:
    for child in directory.iterdir():
        child.unlink()
    directory.rmdir()


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        (_extra, "files.extra"),
        (_missing, "files.missing"),
        (_grown, "files.size_mismatch"),
        (_symlinked_file, "files.not_regular"),
        (_symlinked_dir, "files.not_regular"),
        (_not_staged, "files.missing"),
    ],
    ids=["extra-file", "missing-file", "size", "symlinked-file", "symlinked-dir", "not-staged"],
)
async def test_staged_files_that_do_not_match_are_refused_with_their_code(
    engine_b: EngineHandle,
    stage_adapter: Stage,
    tmp_path: Path,
    damage: Callable[[Path, Path], None],
    code: str,
) -> None:
    name, path = stage_adapter(engine_b, "sample-r8")
    manifest = _manifest(Path(path))
    damage(Path(path), tmp_path)
    async with engine_b.client() as engine:
        error = await _refused(engine, name, manifest)
        assert (error.status, error.permanent, file_error_code(error)) == (409, True, code)
        assert name not in await _models(engine)
        assert name not in (await engine.residency())["loads"]


GOOD_ENTRY = {"name": CONFIG, "size": 1, "sha256": "0" * 64}


@pytest.mark.parametrize(
    ("name", "manifest", "code"),
    [
        ("../x", [GOOD_ENTRY], "name.invalid"),
        ("Acme--support--v3-1f2e3d4c", [GOOD_ENTRY], "name.invalid"),
        ("x/y", [GOOD_ENTRY], "name.invalid"),
        ("a", [GOOD_ENTRY], "name.invalid"),
        ("-x-", [GOOD_ENTRY], "name.invalid"),
        ("ok-name", [], "manifest.invalid"),
        ("ok-name", [{**GOOD_ENTRY, "name": "../adapter_config.json"}], "manifest.invalid"),
        ("ok-name", [{**GOOD_ENTRY, "sha256": "XY"}], "manifest.invalid"),
        ("ok-name", [GOOD_ENTRY, GOOD_ENTRY], "manifest.invalid"),
    ],
    ids=[
        "dotdot",
        "uppercase",
        "slash",
        "too-short",
        "dash-edges",
        "empty-manifest",
        "path-in-manifest",
        "bad-sha",
        "repeated-file",
    ],
)
async def test_bad_names_and_manifests_are_refused_before_any_file_is_touched(
    engine_a: EngineHandle, name: str, manifest: list[dict[str, Any]], code: str
) -> None:
    async with engine_a.client() as engine:
        error = await _refused(engine, name, manifest)
    assert (error.status, error.permanent, plugin_error_code(error)) == (400, True, code)
    assert file_error_code(error) is None


async def test_a_second_load_is_idempotent_and_counts_once(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r32")
    manifest = _manifest(Path(path))
    async with engine_a.client() as engine:
        try:
            first = await engine.load_verified(name, manifest)
            again = await engine.load_verified(name, manifest)
            assert (again["already_loaded"], again["verified"], again["resident"]) == (
                True,
                True,
                True,
            )
            assert again["lora_int_id"] == first["lora_int_id"]
            assert (await engine.residency())["loads"][name] == 1

            # The same name with other files is not "already loaded": it is a conflict.
            other = [{**manifest[0], "sha256": "0" * 64}, *manifest[1:]]
            error = await _refused(engine, name, other)
            assert file_error_code(error) == "files.conflict"
        finally:
            await engine.evict(name)


async def test_twenty_concurrent_loads_of_one_name_load_it_once(
    engine_b: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_b, "sample-r16")
    manifest = _manifest(Path(path))
    async with engine_b.client() as engine:
        try:
            answers = await asyncio.gather(
                *(engine.load_verified(name, manifest) for _ in range(20))
            )
            assert [a["already_loaded"] for a in answers].count(False) == 1
            assert {a["lora_int_id"] for a in answers} == {answers[0]["lora_int_id"]}
            assert (await engine.residency())["loads"][name] == 1
            assert _text(await engine.chat(name, PROMPT, **GREEDY))
        finally:
            await engine.evict(name)


async def test_unpin_keeps_the_adapter_resident_and_serving_but_unpinned(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_a, "sample-r8")
    async with engine_a.client() as engine:
        try:
            await engine.load_verified(name, _manifest(Path(path)))
            before = _text(await engine.chat(name, PROMPT, **GREEDY))
            await engine.pin(name)
            pinned = await engine.residency()
            assert name in pinned["pinned"]
            assert pinned["gpu_pinned"] == [name]  # the worker's own pin, not only our record

            unpinned = await engine.unpin(name)
            assert (unpinned["name"], unpinned["pinned"]) == (name, False)
            after = await engine.residency()
            assert name in after["resident"]
            assert name in {r["name"] for r in after["registered"]}
            assert name not in after["pinned"]
            assert after["gpu_pinned"] == []
            assert name in after["gpu"]  # read back into a GPU slot, unpinned
            assert after["loads"][name] == 2  # unpin re-reads the weights: counted
            assert _text(await engine.chat(name, PROMPT, **GREEDY)) == before

            with pytest.raises(EngineError) as again:
                await engine.unpin(name)
            assert (again.value.status, plugin_error_code(again.value)) == (409, "pin.not_pinned")
            with pytest.raises(EngineError) as unknown:
                await engine.unpin("never-loaded-name")
            assert unknown.value.status == 404
        finally:
            await engine.evict(name)


async def test_unpin_refuses_to_reread_files_that_changed_and_keeps_the_pin(
    engine_b: EngineHandle, stage_adapter: Stage
) -> None:
    name, path = stage_adapter(engine_b, "sample-r8")
    async with engine_b.client() as engine:
        try:
            await engine.load_verified(name, _manifest(Path(path)))
            await engine.pin(name)
            _break_header(Path(path) / WEIGHTS)
            with pytest.raises(EngineError) as info:
                await engine.unpin(name)
            assert file_error_code(info.value) == "files.sha256_mismatch"
            residency = await engine.residency()
            assert name in residency["pinned"] and residency["gpu_pinned"] == [name]
        finally:
            await engine.evict(name)


async def test_residency_shows_which_adapters_sit_in_the_gpu_slots(
    engine_a: EngineHandle, stage_adapter: Stage
) -> None:
    staged = [
        stage_adapter(engine_a, source) for source in ("sample-r8", "sample-r16", "sample-r32")
    ]
    names = [name for name, _ in staged]
    async with engine_a.client() as engine:
        try:
            for name, path in staged:
                await engine.load_verified(name, _manifest(Path(path)))
            residency = await engine.residency()
            assert residency["gpu_observed"] is True
            # max_loras 2: each load takes a GPU slot, the least recently used one leaves.
            assert residency["gpu"] == sorted(names[1:])
            assert set(names) <= set(residency["resident"])  # all three stay in the CPU cache

            await engine.chat(names[0], PROMPT, **GREEDY)
            residency = await engine.residency()
            assert residency["gpu"] == sorted([names[0], names[2]])
            ids = {r["name"]: r["lora_int_id"] for r in residency["registered"]}
            assert residency["gpu_ids"] == [ids[names[2]], ids[names[0]]]  # LRU order
        finally:
            for name in names:
                await engine.evict(name)


# -- without a running engine ------------------------------------------------------------------

FAKE_APP = r"""
import asyncio, json, os
from argparse import Namespace
from pathlib import Path

from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.datastructures import State

from portal_engine_plugin import PortalEndpointPlugin, PortalState


class Engine:  # stands in for vLLM's engine client; any call to it would be a failure here
    async def list_loras(self):
        return set()


class Models:
    lora_requests = {}


os.environ.pop("PORTAL_ADAPTER_ROOT", None)
os.environ.pop("PORTAL_ENGINE_KEY", None)  # before attach: with a key every call would be a 401
plugin = PortalEndpointPlugin()
app = FastAPI()
plugin.attach_router(app)
app.state.openai_serving_models = Models()
state = State()
asyncio.run(plugin.init_state(Engine(), state, Namespace()))
body = {"name": "acme--a--v1-1f2e3d4c",
        "manifest": [{"name": "adapter_config.json", "size": 1, "sha256": "0" * 64}]}
out = {}
client = TestClient(app)
for label, root in [("unset", state.portal.adapter_root), ("missing", Path("/nonexistent/root")),
                    ("relative", Path("var/adapters"))]:
    app.state.portal = PortalState(Engine(), None, root)
    answer = client.post("/portal/load", json=body)
    out[label] = [answer.status_code, answer.json()["error"]["message"]]
out["residency"] = client.get("/portal/residency").json()
print(json.dumps(out))
"""


def test_an_engine_without_a_usable_adapter_root_refuses_loads_with_503() -> None:
    if not ENGINE_PYTHON.exists():
        pytest.fail(f"{ENGINE_PYTHON} is missing: run engine/setup_venv.sh (make test does)")
    result = subprocess.run(
        [str(ENGINE_PYTHON), "-c", FAKE_APP],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["unset"][0] == 503 and out["unset"][1].startswith("root.unset: ")
    assert out["missing"][0] == 503 and out["missing"][1].startswith("root.missing: ")
    assert out["relative"][0] == 503 and out["relative"][1].startswith("root.missing: ")
    # Started without the worker extension, the GPU view says so instead of guessing.
    residency = out["residency"]
    assert (residency["gpu_observed"], residency["gpu"]) == (False, None)
    assert "--worker-extension-cls" in residency["gpu_reason"]


def _files_module() -> ModuleType:
    # Standard library only, so the portal's interpreter can load it by path (the package's
    # __init__ needs fastapi, which only the engine's venv has).
    path = REPO_ROOT / "engine/plugin/portal_engine_plugin/files.py"
    spec = importlib.util.spec_from_file_location("portal_plugin_files", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_files_changed_after_verification_are_caught(tmp_path: Path, tiny_model_dir: Path) -> None:
    files = _files_module()
    directory = tmp_path / "acme--a--v1-1f2e3d4c"
    directory.mkdir()
    for source in (tiny_model_dir / "adapters" / "sample-r8").iterdir():
        (directory / source.name).write_bytes(source.read_bytes())
    manifest = files.parse_manifest(_manifest(directory))

    verified = files.verify_dir(directory, manifest)
    files.check_unchanged(verified)  # nothing happened: passes

    # Same size, same content, new inode (a replace by rename): vLLM would read another file.
    copy = tmp_path / "copy"
    copy.write_bytes((directory / WEIGHTS).read_bytes())
    copy.replace(directory / WEIGHTS)
    with pytest.raises(files.FileCheckError) as info:
        files.check_unchanged(verified)
    assert info.value.code == "files.changed"
    files.check_unchanged(files.verify_dir(directory, manifest))  # verified again: fine

    verified = files.verify_dir(directory, manifest)
    (directory / "late.txt").write_text("added after verification")
    with pytest.raises(files.FileCheckError) as added:
        files.check_unchanged(verified)
    assert added.value.code == "files.changed"
