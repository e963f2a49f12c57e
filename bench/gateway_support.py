"""What the gateway benchmarks share (bench/gateway_overhead.py, bench/gateway_routing.py): the
pure arithmetic of their reports, an async load generator, and the processes they start (CPU
engines, the portal's uvicorn, a Celery worker) on a database and Redis of their own.

The arithmetic and the load generator need no Django; everything below `# --- processes` does
only once `django_setup` has run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

import httpx
import orjson

from engine.launcher import (
    REPO_ROOT,
    EngineConfig,
    EngineProcess,
    EngineStartError,
    ensure_tiny_model,
)

T = TypeVar("T")
READY_TIMEOUT_S = 600.0  # bounds a broken start only; nothing is judged by it


# --- arithmetic (tests/bench/test_gateway_bench_report.py) ---


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of the samples at or below it."""
    if not values:
        raise ValueError("no samples")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


@dataclass(frozen=True)
class Sample:
    """One request as the client saw it; times in ms from sending the request."""

    ok: bool
    status: int
    total_ms: float
    ttft_ms: float | None = None  # streaming: the first event that carries a token
    error: str = ""


@dataclass(frozen=True)
class Summary:
    n: int
    errors: int
    p50: float
    p99: float
    mean: float

    @classmethod
    def of(cls, values: Sequence[float], errors: int = 0) -> Summary:
        return cls(
            n=len(values),
            errors=errors,
            p50=percentile(values, 0.5),
            p99=percentile(values, 0.99),
            mean=sum(values) / len(values),
        )


def summarize(samples: Sequence[Sample], *, ttft: bool) -> Summary:
    """p50/p99 of the successful samples' total time (or TTFT); failures only counted."""
    good = [s for s in samples if s.ok and (s.ttft_ms is not None or not ttft)]
    values = [s.ttft_ms if ttft else s.total_ms for s in good]
    return Summary.of([v for v in values if v is not None], errors=len(samples) - len(good))


def zipf_weights(k: int, s: float) -> list[float]:
    """Popularity of ranks 1..k under Zipf(s), summing to 1."""
    raw = [1 / (rank**s) for rank in range(1, k + 1)]
    total = sum(raw)
    return [w / total for w in raw]


def zipf_trace(n: int, k: int, s: float, seed: int) -> list[int]:
    """n draws of ranks 0..k-1 (0 the most popular), reproducible from the seed."""
    rng = random.Random(seed)
    return rng.choices(range(k), weights=zipf_weights(k, s), k=n)


def poisson_arrivals(n: int, rate: float, seed: int) -> list[float]:
    """Send times in seconds from the start: exponential gaps at `rate` per second."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


def first_token_at(event: bytes) -> bool:
    """Whether one SSE `data:` event carries generated text (chat delta or completion text)."""
    data = event.strip()
    if not data.startswith(b"data:"):
        return False
    data = data[5:].strip()
    if data == b"[DONE]":
        return False
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    for choice in choices or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or choice.get("text"):
            return True
    return False


# --- the load generator ---


@dataclass(frozen=True)
class Target:
    """Where one kind of request goes: the engine itself, or a proxy in front of it."""

    name: str
    base_url: str
    model: str
    headers: dict[str, str]


def request_body(target: Target, *, chat: bool, stream: bool, max_tokens: int, text: str) -> bytes:
    body: dict[str, Any] = {
        "model": target.model,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
    }
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    return orjson.dumps(body)


async def send_one(
    client: httpx.AsyncClient, target: Target, *, chat: bool, stream: bool, body: bytes
) -> Sample:
    """One request; for a stream, TTFT is when the first event carrying text arrived."""
    path = "/v1/chat/completions" if chat else "/v1/completions"
    headers = {"content-type": "application/json", **target.headers}
    started = time.perf_counter()
    ttft: float | None = None
    try:
        async with client.stream(
            "POST", target.base_url + path, content=body, headers=headers
        ) as response:
            if not stream or response.status_code != 200:
                data = await response.aread()
                ok = response.status_code == 200
                error = "" if ok else data[:300].decode(errors="replace")
                elapsed = (time.perf_counter() - started) * 1000
                return Sample(ok, response.status_code, elapsed, error=error)
            buffer = b""
            async for chunk in response.aiter_raw():
                if ttft is None:
                    buffer += chunk
                    while b"\n\n" in buffer and ttft is None:
                        event, buffer = buffer.split(b"\n\n", 1)
                        if first_token_at(event):
                            ttft = (time.perf_counter() - started) * 1000
            done = time.perf_counter()
            return Sample(
                ttft is not None, 200, (done - started) * 1000, ttft, "" if ttft else "no token"
            )
    except httpx.HTTPError as exc:
        return Sample(False, 0, (time.perf_counter() - started) * 1000, error=repr(exc)[:300])


def new_client(concurrency: int, timeout: float = 120.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(timeout, connect=5.0),
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
    )


async def closed_loop(
    target: Target,
    *,
    count: int,
    concurrency: int,
    body: bytes,
    chat: bool,
    stream: bool,
    deadline_s: float,
) -> tuple[list[Sample], float]:
    """`count` requests, `concurrency` at a time, each sent as soon as one finishes; stops
    early at `deadline_s`. Returns the samples and the wall time."""
    samples: list[Sample] = []
    issued = 0
    started = time.perf_counter()
    async with new_client(concurrency) as client:

        async def worker() -> None:
            nonlocal issued
            while issued < count and time.perf_counter() - started < deadline_s:
                issued += 1
                samples.append(await send_one(client, target, chat=chat, stream=stream, body=body))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, time.perf_counter() - started


class ServerClosed(Exception):
    """The server closed the connection before a status line (an idle keep-alive ended)."""


class RawClient:
    """One keep-alive HTTP/1.1 connection over asyncio streams: the load generator.

    httpx spends ~5 ms of CPU per request here, more than the proxies measured; this spends
    little, so one core of load can saturate a proxy on the other. Content-length and chunked
    replies; for a stream, TTFT is when the first chunk carrying text arrived.
    """

    def __init__(self, base_url: str, source: str | None = None) -> None:
        host_port = base_url.split("://", 1)[1].rstrip("/")
        host, _, port = host_port.partition(":")
        self.host, self.port = host, int(port or 80)
        self.local_addr = (source, 0) if source else None  # the address it sends from
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def request_bytes(self, path: str, headers: dict[str, str], body: bytes) -> bytes:
        lines = [f"POST {path} HTTP/1.1", f"host: {self.host}:{self.port}"]
        lines += ["content-type: application/json", f"content-length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body

    async def send(self, request: bytes, *, stream: bool) -> Sample:
        """One request; a kept-alive connection the server closed meanwhile is reopened and
        the request sent again once (as any HTTP client does), timed from the new send."""
        for attempt in (0, 1):
            reused = self.writer is not None
            started = time.perf_counter()
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(
                        self.host, self.port, local_addr=self.local_addr
                    )
                assert self.reader is not None
                self.writer.write(request)
                status, close, data, ttft = await self._response(self.reader, stream, started)
                break
            except ServerClosed:
                await self.close()
                if reused and attempt == 0:
                    continue
                return Sample(False, 0, (time.perf_counter() - started) * 1000, error="closed")
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                await self.close()
                elapsed = (time.perf_counter() - started) * 1000
                return Sample(False, 0, elapsed, error=repr(exc)[:300])
        if close:
            await self.close()
        total = (time.perf_counter() - started) * 1000
        if status != 200:
            return Sample(False, status, total, error=data[:300].decode(errors="replace"))
        if stream and ttft is None:
            return Sample(False, status, total, error="no token")
        return Sample(True, status, total, ttft)

    async def _response(
        self, reader: asyncio.StreamReader, stream: bool, started: float
    ) -> tuple[int, bool, bytes, float | None]:
        first = await reader.readline()
        if not first:
            raise ServerClosed
        status = int(first.split(b" ", 2)[1])
        length, chunked, close = 0, False, False
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value:
                chunked = True
            elif name == b"connection" and value == b"close":
                close = True
        if not chunked:
            return status, close, await reader.readexactly(length), None
        ttft: float | None = None
        parts, events = [], b""
        while size := int((await reader.readline()).split(b";", 1)[0], 16):
            chunk = await reader.readexactly(size)
            await reader.readexactly(2)
            parts.append(chunk)
            if stream and ttft is None:
                events += chunk
                while ttft is None and b"\n\n" in events:
                    event, events = events.split(b"\n\n", 1)
                    if first_token_at(event):
                        ttft = (time.perf_counter() - started) * 1000
        while (await reader.readline()) not in (b"\r\n", b""):
            pass  # trailers
        return status, close, b"".join(parts), ttft

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


async def raw_closed_loop(
    target: Target, *, path: str, body: bytes, count: int, concurrency: int, deadline_s: float
) -> tuple[list[Sample], float]:
    """`count` non-streaming requests over `concurrency` keep-alive connections, each sent as
    soon as the connection's previous one finished; stops early at `deadline_s`."""
    samples: list[Sample] = []
    issued = 0
    started = time.perf_counter()

    async def worker() -> None:
        nonlocal issued
        client = RawClient(target.base_url)
        request = client.request_bytes(path, target.headers, body)
        try:
            while issued < count and time.perf_counter() - started < deadline_s:
                issued += 1
                samples.append(await client.send(request, stream=False))
        finally:
            await client.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return samples, time.perf_counter() - started


# --- processes ---


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and all its live descendants (from /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            stat = Path(f"/proc/{current}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                todo += [int(c) for c in children]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def tree_threads(pid: int) -> list[int]:
    """Every thread of a process and of its live descendants (from /proc)."""
    threads, todo = [], [pid]
    while todo:
        current = todo.pop()
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                threads.append(int(task.name))
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return threads


def renice_tree(pid: int, niceness: int) -> int:
    """Every thread of the process tree at `niceness` (Linux nices threads one by one); how
    many threads it reached."""
    done = 0
    for tid in tree_threads(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
            done += 1
    return done


@contextlib.contextmanager
def pinned_to(cpus: set[int]) -> Iterator[None]:
    """This process (the load generator) on `cpus` only, while the block runs."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def spawn(
    cmd: list[str], *, log: Path, env: dict[str, str], cpus: str | None = None
) -> subprocess.Popen[bytes]:
    """A process group of its own (so stop_group ends all of it), optionally under taskset."""
    log.parent.mkdir(parents=True, exist_ok=True)
    prefix = ["taskset", "-c", cpus] if cpus else []
    return subprocess.Popen(
        prefix + cmd,
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop_group(proc: subprocess.Popen[bytes] | None, timeout: float = 20.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_http(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 120.0) -> None:
    """Until `url` answers at all (any HTTP status); raise with the log's tail if it dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            urllib.request.urlopen(url, timeout=1)  # noqa: S310 - a loopback URL we built
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s")


@contextlib.contextmanager
def sigterm_runs_cleanup() -> Iterator[None]:
    """SIGTERM (a timeout, `kill`) becomes KeyboardInterrupt, so `finally` stops everything."""

    def _raise(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def tiny_model() -> Path:
    """var/tiny (the engine kit's tiny Llama), built with the engine's interpreter if missing."""
    try:
        return ensure_tiny_model()
    except EngineStartError as exc:
        sys.exit(str(exc))


def engine_config(
    tiny: Path,
    var: Path,
    name: str,
    key: str,
    *,
    max_loras: int,
    max_cpu_loras: int,
    cpu_cores: str | None = None,
) -> EngineConfig:
    return EngineConfig(
        cpu_cores=cpu_cores,
        model=tiny / "base",
        port=free_port(),
        max_loras=max_loras,
        max_cpu_loras=max_cpu_loras,
        max_lora_rank=32,
        adapter_root=var / f"{name}-adapters",
        log_path=var / f"{name}.log",
        engine_key=key,
        die_with_parent=True,
    )


def other_vllm_engines(own: Sequence[EngineProcess]) -> int:
    """How many vLLM API servers run on this machine besides ours (others' tests, benches)."""
    mine = {e.pid for e in own}
    count = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) in mine:
            continue
        try:
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        count += b"vllm.entrypoints.openai.api_server" in cmd
    return count


def machine_note(started_load: float, own: Sequence[EngineProcess]) -> str:
    return (
        f"{os.cpu_count()} cores; load average {started_load:.1f} when the run started and "
        f"{os.getloadavg()[0]:.1f} at its end; {other_vllm_engines(own)} other vLLM engines "
        "running at the end (other tests on the machine)"
    )


def start_engines(
    tiny: Path,
    var: Path,
    names: Sequence[str],
    *,
    max_loras: int,
    max_cpu_loras: int,
    pinned: bool = False,
) -> tuple[dict[str, EngineProcess], dict[str, str]]:
    """One CPU engine per name, each with a key of its own; started, not yet ready. `pinned`:
    the i-th engine's whole process tree on core i (modulo the cores), as each engine has its
    own accelerator and host in production: unbound, vLLM puts every engine on core 0 and a
    bench measures engines time-slicing one core."""
    import secrets

    cores = os.cpu_count() or 1
    engines, keys = {}, {}
    for i, name in enumerate(names):
        keys[name] = secrets.token_hex(16)
        config = engine_config(
            tiny,
            var,
            name,
            keys[name],
            max_loras=max_loras,
            max_cpu_loras=max_cpu_loras,
            cpu_cores=str(i % cores) if pinned else None,
        )
        engines[name] = EngineProcess(config).start()
    return engines, keys


def start_worker(
    queue: str, nodes: Sequence[str], log: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """A Celery worker (threads, 4) on the shared queue and each node's queue, answering pings."""
    from portal.celery import app

    queues = [queue, *(f"{queue}.node.{n}" for n in nodes)]
    cmd = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-Q", ",".join(queues)]
    cmd += ["--pool", "threads", "--concurrency", "4", "-n", f"{queue}@%h"]
    cmd += ["--loglevel", "INFO", "--without-gossip", "--without-mingle"]
    worker = spawn(cmd, log=log, env={**os.environ, **env})
    deadline = time.monotonic() + 120
    while not app.control.ping(destination=[f"{queue}@{os.uname().nodename}"], timeout=0.5):
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"celery worker did not start: {log.read_text()[-2000:]}")
    return worker


# --- Django: the bench's own database and Redis ---


def service_env(*, db_url: str, redis_url: str, var: Path, keys: dict[str, str]) -> dict[str, str]:
    """The environment of the bench and of every portal process it starts."""
    import json

    return {
        "DJANGO_SETTINGS_MODULE": "tests.settings",  # production settings, DEBUG off
        "DATABASE_URL": db_url,
        "REDIS_URL": redis_url,
        "PORTAL_VAR_DIR": str(var / "portal"),
        "ADAPTER_STORAGE_BACKEND": "local",
        "ADAPTER_STORAGE_ROOT": str(var / "storage"),
        "PORTAL_ENGINE_KEYS": json.dumps(keys),
        "CHANNELS_PREFIX": f"bench-{var.name}",
        "LOG_LEVEL": "WARNING",
    }


def django_setup(env: dict[str, str], db_url: str) -> None:
    """Fresh database (dropped and created), Redis DB flushed, Django set up and migrated."""
    from bench.list_versions import recreate_database

    os.environ.update(env)
    flush_redis(env["REDIS_URL"])
    recreate_database(db_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def flush_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()  # the bench's own database only
    finally:
        client.close()


@dataclass
class Tenancy:
    tenant: Any
    owner: Any
    token: str  # plaintext inference token bound to the tenant
    base: Any


def seed_tenancy(tiny: Path) -> Tenancy:
    """One tenant with an owner, an inference token and the tiny base model; no rate limit in
    reach (the check still runs on every request)."""
    from django.contrib.auth import get_user_model

    from adapters.access import AccessContext, SystemAccess
    from adapters.services.registry import base_model_register_from_dir
    from engine.sample_adapters import TINY_BASE_MODEL_NAME
    from tenants.models import Membership, Tenant
    from tenants.services.tokens import token_issue

    tenant = Tenant.objects.create(
        slug="bench", name="Bench", slo_class="silver", quota_requests_per_minute=2_000_000_000
    )
    owner = get_user_model().objects.create_user(username="bench-owner")
    Membership.objects.create(user=owner, tenant=tenant, role="owner")
    token = token_issue(access=AccessContext.for_user(owner), scopes=["inference"], tenant=tenant)
    base = base_model_register_from_dir(
        access=SystemAccess(), name=TINY_BASE_MODEL_NAME, model_dir=tiny / "base"
    )
    return Tenancy(tenant, owner, token.plaintext, base)


def engine_row(name: str, proc: EngineProcess, base: Any) -> Any:
    from workers.models import Engine, EngineState

    config = proc.config
    return Engine.objects.create(
        name=name,
        base_model=base,
        url=proc.base_url,
        served_model_name=config.served_model_name,
        max_loras=config.max_loras,
        max_cpu_loras=config.max_cpu_loras or config.max_loras,
        max_lora_rank=config.max_lora_rank,
        max_num_seqs=config.max_num_seqs,
        max_model_len=config.max_model_len,
        adapter_root=str(Path(config.adapter_root or "").resolve()),
        has_plugin=True,
        state=EngineState.UP,
        pool="shared",
    )


def seed_resident_adapter(
    engine: EngineProcess, key: str, tenancy: Tenancy, var: Path, **adapter_fields: Any
) -> Any:
    """An active version, its files on the engine's node, loaded and resident (as the fleet
    would leave a hot adapter); the gateway's table reads the Residency row."""
    from adapters.models import Adapter
    from tests.workers.fleet import servable_version

    adapter = Adapter.objects.create(
        tenant=tenancy.tenant, name="support", base_model=tenancy.base, **adapter_fields
    )
    version = servable_version(adapter, var / "src", seed=1)
    row = engine_row("bench-engine", engine, tenancy.base)
    make_resident(engine, key, row, version, var / "src" / "src-support-1")
    return version


def make_resident(engine: EngineProcess, key: str, row: Any, version: Any, src: Path) -> None:
    """`version`'s files (from `src`) on the engine's node, loaded, and its Residency row."""
    import shutil

    from workers.models import Residency, ResidencyState
    from workers.vllm_client import VLLMClient

    staged = Path(engine.config.adapter_root or "") / version.served_name
    shutil.copytree(src, staged)

    async def load() -> None:
        async with VLLMClient(engine.base_url, engine_key=key) as client:
            await client.load_adapter(version.served_name, str(staged.resolve()))

    asyncio.run(load())
    Residency.objects.create(
        engine=row,
        version=version,
        desired_state=ResidencyState.RESIDENT_GPU,
        observed_state=ResidencyState.RESIDENT_GPU,
    )


# As the Procfile's web line: no per-message deflate on websockets (it compressed the same live
# update once per socket: a tenth of the event loop's time at 500 sockets, bench/live_fanout.py).
PORTAL_UVICORN_OPTIONS = [
    "--lifespan",
    "off",
    "--no-access-log",
    "--ws-per-message-deflate",
    "false",
]


def start_gateway(
    env: dict[str, str],
    log: Path,
    *,
    cpus: str | None,
    extra: dict[str, str] | None = None,
    app: str = "portal.asgi:application",
) -> tuple[subprocess.Popen[bytes], str]:
    """portal.asgi (or a benchmark's own `app`) under one uvicorn process (the gateway beside
    Django), as deployed."""
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--workers", "1", *PORTAL_UVICORN_OPTIONS]
    proc = spawn(cmd, log=log, env={**os.environ, **env, **(extra or {})}, cpus=cpus)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/v1/models", proc, log)
    return proc, base


# --- a stub engine: answers at once, so a proxy in front of it is the bottleneck ---


STUB_REPLY = {
    "id": "cmpl-stub",
    "object": "chat.completion",
    "created": 0,
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Tea"},
            "finish_reason": "length",
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}


def stub_response(request_body: bytes) -> bytes:
    """One HTTP/1.1 keep-alive reply: a chat completion naming the requested model."""
    try:
        model = orjson.loads(request_body).get("model", "stub") if request_body else "stub"
    except (orjson.JSONDecodeError, AttributeError):
        model = "stub"
    body = orjson.dumps({**STUB_REPLY, "model": model})
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class StubEngine(asyncio.Protocol):
    """Just enough HTTP/1.1 (content-length bodies, keep-alive) for non-streaming chat."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.buffer = b""

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            length = 0
            for line in self.buffer[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            self.transport.write(stub_response(body))


def serve_stub(port: int) -> None:
    import uvloop

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(StubEngine, "127.0.0.1", port)
        async with server:
            await server.serve_forever()

    uvloop.run(run())


def start_stub(log: Path, cpus: str | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "bench.gateway_support", "stub-engine", str(port)]
    proc = spawn(cmd, log=log, env=dict(os.environ), cpus=cpus)
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/health", proc, log, timeout=30)
    return proc, base


def serve_gateway_profiled(port: int, out: str) -> None:
    """portal.asgi under uvicorn inside cProfile; the stats are written when SIGTERM stops it.

    uvicorn re-raises the signal after its graceful shutdown; our handler, installed first,
    turns that into SystemExit so the profile is dumped (the cProfile CLI would die first)."""
    import cProfile

    import uvicorn

    def _exit(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _exit)
    profile = cProfile.Profile()
    try:
        profile.runcall(
            uvicorn.run,
            "portal.asgi:application",
            host="127.0.0.1",
            port=port,
            lifespan="off",
            access_log=False,
        )
    except SystemExit:
        pass
    finally:
        profile.dump_stats(out)


if __name__ == "__main__":
    if sys.argv[1:2] == ["stub-engine"]:
        serve_stub(int(sys.argv[2]))
    elif sys.argv[1:2] == ["gateway-profiled"]:
        serve_gateway_profiled(int(sys.argv[2]), sys.argv[3])


def measure_and_save(
    var: Path, db_url: str, keep_db: bool, services: Any, measure: Callable[[], T]
) -> T:
    """`measure_and_clean_up` for a bench whose `services` has `stop_all`, with the result (a
    dataclass) saved as `var`/result.json for `--render-only`."""
    result = measure_and_clean_up(
        var, db_url, keep_db=keep_db, measure=measure, stop_all=services.stop_all
    )
    (var / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))  # type: ignore[call-overload]
    return result


def measure_and_clean_up(
    var: Path, db_url: str, *, keep_db: bool, measure: Callable[[], T], stop_all: Callable[[], None]
) -> T:
    """Run one engine benchmark's `measure` in a fresh `var` folder, then stop its processes
    (`stop_all`) and, once it got as far as its own database (DATABASE_URL set to `db_url`),
    empty its Redis database and drop the database unless `keep_db`."""
    from bench.list_versions import drop_database

    shutil.rmtree(var, ignore_errors=True)
    var.mkdir(parents=True)
    try:
        with sigterm_runs_cleanup():
            return measure()
    finally:
        stop_all()
        if os.environ.get("DATABASE_URL") == db_url:
            flush_redis(os.environ["REDIS_URL"])
            if not keep_db:
                drop_database(db_url)
