"""The launcher without an engine: the command and environment it builds, and group shutdown."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.launcher import (
    WORKER_EXTENSION,
    EngineConfig,
    EngineProcess,
    EngineStartError,
    otlp_traces_endpoint_from_env,
    stop_process_groups,
)


def test_it_starts_the_openai_server_with_lora_on_loopback(tmp_path: Path) -> None:
    config = EngineConfig(
        model=tmp_path, port=8123, max_loras=2, max_cpu_loras=4, max_lora_rank=32, engine_key="k"
    )
    cmd = config.command()
    assert cmd[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for flag in ("--enable-lora", "--max-loras 2", "--max-cpu-loras 4", "--max-lora-rank 32"):
        assert flag in joined
    assert "--host 127.0.0.1" in joined
    env = config.environment()
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "true"
    assert env["VLLM_PLUGINS"] == "portal"
    assert env["PORTAL_ENGINE_KEY"] == "k"
    # vLLM's --api-key, as its environment variable: the key stays off the command line.
    assert env["VLLM_API_KEY"] == "k" and "k" not in cmd


def test_it_gives_the_engine_its_adapter_root_and_the_plugin_worker_method(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PORTAL_ADAPTER_ROOT", raising=False)
    monkeypatch.chdir(tmp_path)
    config = EngineConfig(model=tmp_path, port=8123, adapter_root=Path("adapters"))
    # Relative on the command line, absolute for the engine: the plugin refuses relative roots.
    assert config.environment()["PORTAL_ADAPTER_ROOT"] == str(tmp_path / "adapters")
    assert "PORTAL_ADAPTER_ROOT" not in EngineConfig(model=tmp_path, port=8123).environment()
    cmd = config.command()
    assert cmd[cmd.index("--worker-extension-cls") + 1] == WORKER_EXTENSION
    # The name the launcher passes is the class the plugin ships.
    module, _, cls = WORKER_EXTENSION.rpartition(".")
    source = Path("engine/plugin", *module.split(".")).with_suffix(".py")
    text = (Path(__file__).resolve().parents[2] / source).read_text()
    assert f"class {cls}:" in text and f'WORKER_EXTENSION = "{WORKER_EXTENSION}"' in text


def test_the_engine_exports_its_spans_where_the_standard_variables_say(tmp_path: Path) -> None:
    assert otlp_traces_endpoint_from_env({}) is None
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318/"}
    assert otlp_traces_endpoint_from_env(base) == "http://collector:4318/v1/traces"
    traces = {**base, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/t"}
    assert otlp_traces_endpoint_from_env(traces) == "http://other:4318/t"
    assert otlp_traces_endpoint_from_env({**traces, "OTEL_SDK_DISABLED": "true"}) is None
    off = EngineConfig(model=tmp_path, port=8123)
    assert "--otlp-traces-endpoint" not in off.command()
    on = EngineConfig(model=tmp_path, port=8123, otlp_traces_endpoint="http://c:4318/v1/traces")
    cmd = on.command()
    assert cmd[cmd.index("--otlp-traces-endpoint") + 1] == "http://c:4318/v1/traces"
    # vLLM's default protocol is gRPC; the endpoint named here speaks OTLP over HTTP.
    assert on.environment()["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"


def test_an_engine_given_cores_runs_there_whole(tmp_path: Path) -> None:
    """bench/neighbours.py: an engine's API server detokenizes every sequence; bound only by
    its compute threads, a busy engine's server took the other engine's core (B's p99 65x alone
    with no gateway at all). Given cores, the whole process tree starts under taskset."""
    config = EngineConfig(model=tmp_path, port=8123, cpu_cores="1")
    cmd = config.command()
    assert cmd[:3] == ["taskset", "-c", "1"]
    assert cmd[4:6] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert config.environment()["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    unpinned = EngineConfig(model=tmp_path, port=8123).command()
    assert "taskset" not in unpinned and unpinned[1] == "-m"


def test_it_refuses_ranks_vllm_does_not_accept(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_lora_rank"):
        EngineConfig(model=tmp_path, port=1, max_lora_rank=24)
    with pytest.raises(ValueError, match="max_cpu_loras"):
        EngineConfig(model=tmp_path, port=1, max_loras=4, max_cpu_loras=2)


def _leader_with_child() -> subprocess.Popen[bytes]:
    # A stand-in for the server: a session leader with a child of its own, like vLLM's API
    # server and its engine-core process.
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess,sys,time; "
            "subprocess.Popen([sys.executable,'-c','import time; time.sleep(600)']); "
            "time.sleep(600)",
        ],
        start_new_session=True,
    )


def test_stop_ends_whole_process_groups_together() -> None:
    leaders = [_leader_with_child(), _leader_with_child()]
    try:
        assert all(leader.poll() is None for leader in leaders)
        stop_process_groups([(leader.pid, leader) for leader in leaders], timeout=10)
        for leader in leaders:
            with pytest.raises(ProcessLookupError):
                os.killpg(leader.pid, 0)
    finally:
        for leader in leaders:
            if leader.poll() is None:
                leader.kill()


def test_wait_ready_reports_an_engine_that_dies(tmp_path: Path) -> None:
    # A "python" that exits at once stands in for a server that crashes during start-up.
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho boom >&2\nexit 3\n")
    fake.chmod(0o755)
    log = tmp_path / "engine.log"
    engine = EngineProcess(EngineConfig(model=tmp_path, port=1, python=fake, log_path=log))
    engine.start()
    with pytest.raises(EngineStartError, match="exited with 3") as info:
        engine.wait_ready(timeout=60)
    assert "boom" in str(info.value)
    engine.stop()
