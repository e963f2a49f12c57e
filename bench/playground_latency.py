"""What the playground adds to the time to first token: a prompt sent on the playground's
websocket until the first token frame arrives, against the engine's own TTFT for the same prompt.

    .venv/bin/python -m bench.playground_latency [--rounds 200] [--warmup 20] [--max-tokens 4]
        [--write-docs] [--keep-db] [--render-only COMMAND]

One real CPU vLLM engine (engine.launcher, the tiny Llama) with a rank-8 adapter loaded and
resident; the portal (portal.asgi under one uvicorn process, `taskset -c 1`: pages, Channels and
the gateway together, as deployed) on a database of its own with one tenant, its owner signed in
(a session cookie, as a browser has) and the adapter's version active. Each round sends, in
rotating order, the same streaming chat request (a) to the engine directly, (b) through the
gateway's API with an inference token, and (c) as a playground prompt on an open websocket; the
client (this process, on core 0) notes when the first event or frame carrying text arrives.
Added = (c)'s p50 (p99) minus (a)'s; (b) shows how much of it is the gateway's own path.

Database: BENCH_PLAYGROUND_DATABASE_URL (default .../lora_portal_bench_playground; created, dropped
at the end unless --keep-db); Redis: BENCH_PLAYGROUND_REDIS_URL (default DB 9, flushed).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import gateway_support as gs
from bench.docs_section import DOCS, write_section
from engine.launcher import REPO_ROOT, EngineProcess, stop_engines

SECTION = "playground-latency"
DEFAULT_DB_URL = "postgres://root@127.0.0.1:5432/lora_portal_bench_playground"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
VAR = REPO_ROOT / "var" / "bench" / "playground-latency"
PORTAL_CPUS, CLIENT_CPUS = "1", {0}
GOAL_ADDED_MS = 20.0
PROMPT = "Tell me about tea."
PATHS = ("direct", "gateway", "playground")
DEADLINE_S = 900.0  # bounds a broken run only


@dataclass
class Result:
    ttft: dict[str, gs.Summary]  # per path, ms
    rounds: int
    max_tokens: int
    machine: str
    seconds: float
    engine_start_s: float

    def added(self, path: str) -> tuple[float, float]:
        """(p50, p99) of `path` minus the engine's own."""
        own, other = self.ttft["direct"], self.ttft[path]
        return other.p50 - own.p50, other.p99 - own.p99

    def goal_met(self) -> bool:
        return all(value < GOAL_ADDED_MS for value in self.added("playground"))


def render(r: Result, command: str, note: str = "") -> str:
    p50, p99 = r.added("playground")
    g50, g99 = r.added("gateway")
    rows = [
        f"| {name} | {s.p50:.1f} | {s.p99:.1f} | {s.mean:.1f} | {s.n} | {s.errors} |"
        for name, s in ((name, r.ttft[name]) for name in PATHS)
    ]
    verdict = "met" if r.goal_met() else "NOT met"
    return "\n".join(
        [
            f"<!-- {SECTION}:begin -->",
            "## Playground: time to first token on screen",
            "",
            f"Command: `{command}` ({r.seconds:.0f} s; engine ready in {r.engine_start_s:.0f} s).",
            "",
            "One CPU vLLM engine (tiny Llama) with a rank-8 adapter resident; the portal "
            "(portal.asgi under uvicorn on core 1) with the adapter's version active; the client "
            "on core 0. Each round sends the same streaming chat request "
            f"(`{PROMPT}`, max_tokens {r.max_tokens}) to the engine directly, through the "
            "gateway's API, and as a playground prompt on an open websocket (a signed-in owner's "
            f"session), in rotating order; {r.rounds} rounds after a warm-up. TTFT is when the "
            "first SSE event (or websocket token frame) carrying text reached the client.",
            "",
            "| path | TTFT p50 ms | p99 ms | mean ms | n | errors |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            f"Added by the playground over the engine's own TTFT: p50 **{p50:+.1f} ms**, "
            f"p99 **{p99:+.1f} ms** (goal under {GOAL_ADDED_MS:.0f} ms: **{verdict}**); "
            f"of which the gateway's API path alone: p50 {g50:+.1f} ms, p99 {g99:+.1f} ms. "
            "The rest is the socket's per-prompt access check (for a member's active version, read "
            "from the gateway's tables: no database round trip) and the frame's trip through the "
            "consumer.",
            "",
            f"Machine: {r.machine}.",
            *(["", note] if note else []),
            f"<!-- {SECTION}:end -->",
        ]
    )


# --- the three clients ---


async def playground_ttft(socket: Any, model: str, max_tokens: int) -> gs.Sample:
    """One prompt on an open playground socket: TTFT = the first token frame; then to `done`."""
    started = time.perf_counter()
    await socket.send(json.dumps({"prompt": PROMPT, "models": [model], "max_tokens": max_tokens}))
    ttft: float | None = None
    while True:
        frame = json.loads(await socket.recv())
        if frame["type"] == "token" and ttft is None:
            ttft = (time.perf_counter() - started) * 1000
        elif frame["type"] in ("done", "error"):
            total = (time.perf_counter() - started) * 1000
            error = "" if frame["type"] == "done" else f"{frame['code']}: {frame['message']}"
            ok = not error and ttft is not None
            return gs.Sample(
                ok, 200 if ok else 0, total, ttft, error or ("" if ttft else "no token")
            )


async def measure_rounds(
    targets: dict[str, gs.Target], socket_url: str, headers: dict[str, str], args: Any
) -> dict[str, list[gs.Sample]]:
    from websockets.asyncio.client import connect

    samples: dict[str, list[gs.Sample]] = {name: [] for name in PATHS}
    clients = {name: gs.RawClient(targets[name].base_url) for name in ("direct", "gateway")}
    requests = {
        name: clients[name].request_bytes(
            "/v1/chat/completions",
            targets[name].headers,
            gs.request_body(
                targets[name], chat=True, stream=True, max_tokens=args.max_tokens, text=PROMPT
            ),
        )
        for name in clients
    }
    deadline = time.monotonic() + DEADLINE_S
    async with connect(socket_url, additional_headers=headers) as socket:
        for round_no in range(args.warmup + args.rounds):
            if time.monotonic() > deadline:
                break
            order = PATHS[round_no % 3 :] + PATHS[: round_no % 3]  # drift hits all alike
            for name in order:
                if name == "playground":
                    sample = await playground_ttft(socket, targets[name].model, args.max_tokens)
                else:
                    sample = await clients[name].send(requests[name], stream=True)
                if round_no >= args.warmup:
                    samples[name].append(sample)
    for client in clients.values():
        await client.close()
    return samples


# --- the world ---


def session_headers(user: Any, origin: str) -> dict[str, str]:
    """A signed-in browser's headers: its session cookie and the portal's own origin."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session.save()
    return {"cookie": f"sessionid={session.session_key}", "origin": origin}


def measure(args: argparse.Namespace, procs: dict[str, Any], db_url: str) -> Result:
    import uvloop

    started, load_before = time.time(), os.getloadavg()[0]
    tiny = gs.tiny_model()
    key = secrets.token_hex(16)
    config = gs.engine_config(tiny, VAR, "engine", key, max_loras=2, max_cpu_loras=3)
    engine = procs["engine"] = EngineProcess(config).start()
    redis_url = os.environ.get("BENCH_PLAYGROUND_REDIS_URL", DEFAULT_REDIS_URL)
    env = gs.service_env(db_url=db_url, redis_url=redis_url, var=VAR, keys={"bench-engine": key})
    gs.django_setup(env, db_url)
    tenancy = gs.seed_tenancy(tiny)
    engine_start_s = engine.wait_ready(timeout=gs.READY_TIMEOUT_S)
    version = gs.seed_resident_adapter(engine, key, tenancy, VAR)
    procs["portal"], portal_url = gs.start_gateway(env, VAR / "portal.log", cpus=PORTAL_CPUS)
    label = f"support@{version.number}"
    targets = {
        # The engine's key as a bearer token: engines run with vLLM's --api-key (VLLM_API_KEY).
        "direct": gs.Target(
            "direct", engine.base_url, version.served_name, {"authorization": f"Bearer {key}"}
        ),
        "gateway": gs.Target(
            "gateway", portal_url, label, {"authorization": f"Bearer {tenancy.token}"}
        ),
        "playground": gs.Target("playground", portal_url, label, {}),
    }
    socket_url = portal_url.replace("http://", "ws://") + "/ws/tenants/bench/playground/"
    headers = session_headers(tenancy.owner, portal_url)
    with gs.pinned_to(CLIENT_CPUS):
        samples = uvloop.run(measure_rounds(targets, socket_url, headers, args))
    failures = {name: s.error for name, per in samples.items() for s in per if not s.ok}
    if failures:
        print("failed requests (one per path):", json.dumps(failures, indent=1))
    return Result(
        ttft={name: gs.summarize(per, ttft=True) for name, per in samples.items()},
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        machine=gs.machine_note(load_before, [engine]),
        seconds=time.time() - started,
        engine_start_s=engine_start_s,
    )


def load_result(var: Path) -> Result:
    data = json.loads((var / "result.json").read_text())
    data["ttft"] = {name: gs.Summary(**s) for name, s in data["ttft"].items()}
    return Result(**data)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--write-docs", action="store_true", help=f"update {DOCS.name}")
    parser.add_argument("--keep-db", action="store_true", help="leave the database to inspect")
    parser.add_argument("--render-only", metavar="COMMAND", help="render the last result.json")
    parser.add_argument("--note", default="", help="a paragraph added to the section")
    args = parser.parse_args()
    if args.render_only:
        section = render(load_result(VAR), args.render_only, args.note)
        print(section)
        if args.write_docs:
            write_section(SECTION, section)
        return

    from bench.list_versions import drop_database

    shutil.rmtree(VAR, ignore_errors=True)
    VAR.mkdir(parents=True)
    db_url = os.environ.get("BENCH_PLAYGROUND_DATABASE_URL", DEFAULT_DB_URL)
    procs: dict[str, Any] = {}
    try:
        with gs.sigterm_runs_cleanup():
            result = measure(args, procs, db_url)
    finally:
        gs.stop_group(procs.get("portal"))
        if procs.get("engine") is not None:
            stop_engines([procs["engine"]])
        if os.environ.get("DATABASE_URL") == db_url:  # measure() got as far as its database
            gs.flush_redis(os.environ["REDIS_URL"])
            if not args.keep_db:
                drop_database(db_url)
    (VAR / "result.json").write_text(json.dumps(asdict(result), indent=2, default=str))
    section = render(
        result, " ".join([".venv/bin/python -m bench.playground_latency", *sys.argv[1:]]), args.note
    )
    print(section)
    if args.write_docs:
        write_section(SECTION, section)


if __name__ == "__main__":
    main()
