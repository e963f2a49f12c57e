"""Start, wait for and stop a vLLM OpenAI server on loopback with LoRA on and the portal plugin.

Standard library only, so the portal's test fixtures and `make run` can drive it from any venv;
the server itself always runs under the engine's own interpreter (.venv-engine).

    python -m engine.launcher start --model var/tiny/base --served-model-name tiny-llama \
        --port 8100 --max-loras 2 --max-cpu-loras 4 --max-lora-rank 32 \
        [--adapter-root DIR] [--log FILE]
    python -m engine.launcher stop --port 8100
    python -m engine.launcher run ...   (foreground, for a Procfile: stops the engine on SIGTERM)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

REPO_ROOT = Path(__file__).resolve().parent.parent
ENGINE_PYTHON = REPO_ROOT / ".venv-engine" / "bin" / "python"
STATE_DIR = REPO_ROOT / "var" / "engines"
PLUGIN_NAME = "portal"  # entry-point name in engine/plugin/pyproject.toml
# The plugin's worker method that reports the GPU LoRA slots (engine/plugin/.../worker.py); vLLM
# mixes it into its worker class, the supported way to add collective_rpc methods.
WORKER_EXTENSION = "portal_engine_plugin.worker.PortalWorkerExtension"
VALID_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # what vLLM 0.32 accepts
# An engine that never answered /ping has nothing to shut down gracefully, and vLLM may sit on
# SIGTERM while it is still importing and loading: give it this long before SIGKILL.
STARTING_STOP_TIMEOUT = 5.0


class _Terminated(Exception):
    """Raised by the `run` command's signal handler so the engine is stopped outside it."""


class EngineStartError(RuntimeError):
    """The server exited or never answered /ping; the message carries the log's tail."""


def ensure_tiny_model(out: Path | None = None) -> Path:
    """The tiny model kit's output (var/tiny, or PORTAL_TINY_MODEL_DIR), built with the engine's
    interpreter when missing or stale; EngineStartError when that interpreter does not exist."""
    from engine.tiny_model import is_complete

    default = os.environ.get("PORTAL_TINY_MODEL_DIR", str(REPO_ROOT / "var" / "tiny"))
    target = Path(out or default).resolve()
    if not is_complete(target):
        if not ENGINE_PYTHON.exists():
            raise EngineStartError(
                f"{ENGINE_PYTHON} is missing: run engine/setup_venv.sh (make engine-venv)"
            )
        subprocess.run(
            [str(ENGINE_PYTHON), "-m", "engine.tiny_model", "--out", str(target)],
            cwd=REPO_ROOT,
            check=True,
        )
    return target


@dataclass
class EngineConfig:
    model: Path
    port: int
    served_model_name: str = "tiny-llama"
    host: str = "127.0.0.1"
    max_loras: int = 2
    max_cpu_loras: int | None = None
    max_lora_rank: int = 32
    # Small on purpose: the KV cache and batch buffers scale with these, and a CPU test engine
    # never needs long prompts. With VLLM_CPU_KVCACHE_SPACE=1 one engine stays near 3 GB RSS.
    max_model_len: int = 1024
    max_num_seqs: int = 8
    adapter_root: Path | None = None
    log_path: Path | None = None
    python: Path = ENGINE_PYTHON
    engine_key: str | None = None
    # Linux only: the server gets SIGTERM when the process (thread) that started it dies, so a
    # test session killed hard leaves no engines behind. Start from the main thread: the
    # signal fires when the starting *thread* exits.
    die_with_parent: bool = False
    # The CPU cores the engine runs on, e.g. "1" or "0-1": its compute threads are bound there
    # (VLLM_CPU_OMP_THREADS_BIND) and its whole process tree, the API server that detokenizes
    # every sequence included, is started under `taskset` on them, as an engine in production
    # has its own accelerator and host CPUs. Unset, vLLM's `auto` binds every engine on a
    # 2-core box to core 0 (it keeps one core for the API server), so two busy engines share
    # one core, and a busy engine's API server runs on whatever core is free.
    cpu_cores: str | None = None
    # vLLM's own OTLP export of its request spans (`--otlp-traces-endpoint`), over HTTP/protobuf
    # unless OTEL_EXPORTER_OTLP_TRACES_PROTOCOL says otherwise: a request that carries the
    # gateway's traceparent gets its span as the gateway's child. None: no traces.
    otlp_traces_endpoint: str | None = None
    extra_args: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.max_lora_rank not in VALID_MAX_LORA_RANKS:
            raise ValueError(f"max_lora_rank must be one of {VALID_MAX_LORA_RANKS}")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError("max_cpu_loras must be >= max_loras")

    def command(self) -> list[str]:
        cmd = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(Path(self.model).resolve()),
            "--served-model-name", self.served_model_name,
            "--host", self.host,
            "--port", str(self.port),
            "--enable-lora",
            "--max-loras", str(self.max_loras),
            "--max-lora-rank", str(self.max_lora_rank),
            "--max-model-len", str(self.max_model_len),
            "--max-num-seqs", str(self.max_num_seqs),
            "--max-num-batched-tokens", str(self.max_model_len),
            "--dtype", "float32",
            "--worker-extension-cls", WORKER_EXTENSION,
            # The gateway sets each request's priority from its service class (docs/classes.md).
            "--scheduling-policy", "priority",
        ]  # fmt: skip
        if self.max_cpu_loras is not None:
            cmd += ["--max-cpu-loras", str(self.max_cpu_loras)]
        if self.otlp_traces_endpoint:
            cmd += ["--otlp-traces-endpoint", self.otlp_traces_endpoint]
        pinned = ["taskset", "-c", self.cpu_cores] if self.cpu_cores else []
        return pinned + cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                # GiB of KV cache; unset, vLLM reserves most of the machine's memory.
                "VLLM_CPU_KVCACHE_SPACE": "1",
                # A relative lora_path that does not exist is otherwise fetched from the Hub.
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "true",
                # Endpoint plugins load only when named here; this also allowlists general ones.
                "VLLM_PLUGINS": PLUGIN_NAME,
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.cpu_cores:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_cores
        if self.otlp_traces_endpoint:
            # vLLM's default is gRPC; the portal's processes and this endpoint speak HTTP.
            env.setdefault("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
            env["OTEL_SERVICE_NAME"] = env.get("PORTAL_ENGINE_SERVICE_NAME", "vllm")
        env.pop("VIRTUAL_ENV", None)  # the caller's venv (the portal's) must not leak in
        if self.engine_key:
            # One key, two guards: the plugin's (every route but liveness, see the plugin's
            # guard.py) and vLLM's own --api-key, given as VLLM_API_KEY so it stays out of the
            # command line that `ps` shows every user of the node.
            env["PORTAL_ENGINE_KEY"] = self.engine_key
            env["VLLM_API_KEY"] = self.engine_key
        if self.adapter_root is not None:
            # The plugin builds every adapter path under this root itself (POST /portal/load).
            env["PORTAL_ADAPTER_ROOT"] = str(Path(self.adapter_root).resolve())
        return env


def _die_with_parent() -> None:
    """preexec_fn: ask the kernel to SIGTERM this child when its parent goes away."""
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


def _ping(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback URL we built)
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class EngineProcess:
    """One vLLM server process group. Use as a context manager or call start/wait_ready/stop."""

    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.process: subprocess.Popen[bytes] | None = None
        self.started_at: float | None = None
        self.seconds_to_ready: float | None = None
        self._log_file: object | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.config.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> EngineProcess:
        if self.is_running():
            return self
        if self.config.adapter_root is not None:
            Path(self.config.adapter_root).mkdir(parents=True, exist_ok=True)
        log_path = self.config.log_path
        if log_path is not None:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            log = open(log_path, "ab")  # noqa: SIM115 (lives as long as the process)
        else:
            log = open(os.devnull, "wb")  # noqa: SIM115
        self._log_file = log
        self.seconds_to_ready = None
        self.started_at = time.monotonic()
        # A new session makes the server, its engine core and workers one process group, so
        # stop() can end all of them together (the engine core otherwise outlives its parent).
        self.process = subprocess.Popen(
            self.config.command(),
            env=self.config.environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=str(REPO_ROOT),
            preexec_fn=_die_with_parent if self.config.die_with_parent else None,  # noqa: PLW1509
        )
        return self

    def wait_ready(self, timeout: float = 300.0, interval: float = 0.5) -> float:
        """Poll /ping until 200; return seconds since start. Raise if it dies or times out."""
        if self.process is None or self.started_at is None:
            raise EngineStartError("engine was not started")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise EngineStartError(
                    f"engine on port {self.config.port} exited with {self.process.returncode}"
                    f"\n{self.log_tail()}"
                )
            if _ping(f"{self.base_url}/ping"):
                self.seconds_to_ready = time.monotonic() - self.started_at
                return self.seconds_to_ready
            time.sleep(interval)
        raise EngineStartError(
            f"engine on port {self.config.port} not ready after {timeout:.0f}s\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM the process group, SIGKILL what is left after `timeout`; return the code."""
        if self.process is None:
            return None
        code = stop_process_group(
            self.process.pid, timeout=self._stop_timeout(timeout), child=self.process
        )
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None
        return code

    def _stop_timeout(self, timeout: float) -> float:
        return timeout if self.seconds_to_ready is not None else min(timeout, STARTING_STOP_TIMEOUT)

    def log_tail(self, lines: int = 40) -> str:
        if self.config.log_path is None or not Path(self.config.log_path).exists():
            return "(no log)"
        text = Path(self.config.log_path).read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def __enter__(self) -> EngineProcess:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_process_groups(
    groups: list[tuple[int, subprocess.Popen[bytes] | None]], *, timeout: float = 30.0
) -> None:
    """End process groups (session leaders we started, with their Popen if we have it) together:
    TERM all, wait up to `timeout` for all, KILL what is left. Together, so two engines take
    one timeout at worst, not two (vLLM can sit on SIGTERM while it is still starting)."""
    for pgid, _ in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    alive = list(groups)
    while alive and time.monotonic() < deadline:
        for _, child in alive:
            if child is not None:
                child.poll()  # reaps the leader, or it stays a zombie and the group looks alive
        alive = [(pgid, child) for pgid, child in alive if _group_alive(pgid)]
        if alive:
            time.sleep(0.2)
    for pgid, _ in alive:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    for _, child in groups:
        if child is not None:
            child.wait()


def stop_process_group(
    pgid: int, *, timeout: float = 30.0, child: subprocess.Popen[bytes] | None = None
) -> int | None:
    """End the process group `pgid` (a session leader we started): TERM, wait, then KILL."""
    stop_process_groups([(pgid, child)], timeout=timeout)
    return child.returncode if child is not None else None


def stop_engines(engines: list[EngineProcess], timeout: float = 30.0) -> None:
    """Stop several engines at once (see stop_process_groups)."""
    running = [e for e in engines if e.process is not None]
    timeout = max((e._stop_timeout(timeout) for e in running), default=timeout)
    stop_process_groups([(e.process.pid, e.process) for e in running if e.process], timeout=timeout)
    for engine in running:
        engine.stop()  # already gone: this only closes the log file


def otlp_traces_endpoint_from_env(environ: dict[str, str] | None = None) -> str | None:
    """The OTLP/HTTP traces URL the standard variables name: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    as it is, else OTEL_EXPORTER_OTLP_ENDPOINT + /v1/traces (the SDK's rule); None when unset or
    OTEL_SDK_DISABLED=true."""
    env = dict(os.environ) if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base.rstrip("/") + "/v1/traces" if base else None


def _pid_file(port: int) -> Path:
    return STATE_DIR / f"engine-{port}.pid"


def _config_from_args(args: argparse.Namespace) -> EngineConfig:
    return EngineConfig(
        model=args.model,
        port=args.port,
        served_model_name=args.served_model_name,
        max_loras=args.max_loras,
        max_cpu_loras=args.max_cpu_loras,
        max_lora_rank=args.max_lora_rank,
        max_model_len=args.max_model_len,
        adapter_root=args.adapter_root,
        log_path=args.log or (STATE_DIR / f"engine-{args.port}.log"),
        python=args.python,
        engine_key=os.environ.get("PORTAL_ENGINE_KEY") or None,
        otlp_traces_endpoint=args.otlp_traces_endpoint or otlp_traces_endpoint_from_env(),
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m engine.launcher", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    for action in ("start", "run"):
        p = sub.add_parser(action)
        p.add_argument("--model", required=True, type=Path)
        p.add_argument("--served-model-name", default="tiny-llama")
        p.add_argument("--port", required=True, type=int)
        p.add_argument("--max-loras", type=int, default=2)
        p.add_argument("--max-cpu-loras", type=int, default=None)
        p.add_argument("--max-lora-rank", type=int, default=32)
        p.add_argument("--max-model-len", type=int, default=1024)
        p.add_argument("--adapter-root", type=Path, default=None)
        p.add_argument("--log", type=Path, default=None)
        p.add_argument("--python", type=Path, default=ENGINE_PYTHON)
        p.add_argument("--timeout", type=float, default=300.0)
        p.add_argument(
            "--otlp-traces-endpoint",
            default=None,
            help="vLLM's OTLP traces URL (default: from OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT)",
        )
    stop = sub.add_parser("stop")
    stop.add_argument("--port", required=True, type=int)
    stop.add_argument("--timeout", type=float, default=30.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.action == "stop":
        pid_file = _pid_file(args.port)
        if not pid_file.exists():
            print(json.dumps({"port": args.port, "stopped": False, "reason": "no pid file"}))
            return 0
        stop_process_group(int(pid_file.read_text().strip()), timeout=args.timeout)
        pid_file.unlink(missing_ok=True)
        print(json.dumps({"port": args.port, "stopped": True}))
        return 0

    engine = EngineProcess(_config_from_args(args))
    if args.action == "run":
        # Foreground for process managers: their SIGTERM/SIGINT ends the engine group too. The
        # handler only raises; stopping happens below, outside it (stopping inside would reap
        # the child while Popen.wait may hold its lock, and hang).
        def _terminate(signum: int, frame: object) -> None:
            raise _Terminated(signum)

        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGINT, _terminate)

    try:
        engine.start()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        _pid_file(args.port).write_text(f"{engine.pid}\n")
        try:
            seconds = engine.wait_ready(timeout=args.timeout)
        except EngineStartError as exc:
            engine.stop()
            _pid_file(args.port).unlink(missing_ok=True)
            print(str(exc), file=sys.stderr)
            return 1
        summary = {
            "base_url": engine.base_url,
            "pid": engine.pid,
            "seconds_to_ready": round(seconds, 1),
        }
        print(json.dumps(summary), flush=True)
        if args.action == "start":
            return 0
        while engine.process is not None and engine.process.poll() is None:
            time.sleep(0.5)
        return engine.process.returncode if engine.process else 1
    except _Terminated:
        engine.stop()
        return 0
    finally:
        if args.action == "run":
            _pid_file(args.port).unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
