"""The gateway benchmarks' arithmetic and reports on made-up numbers (no engines, no database):
bench/gateway_support.py, bench/gateway_overhead.py and bench/gateway_routing.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import gateway_overhead as overhead
from bench import gateway_routing as routing
from bench import gateway_support as gs
from bench.docs_section import write_section


def _ok(ms: float, ttft: float | None = None) -> gs.Sample:
    return gs.Sample(True, 200, ms, ttft)


def _failed() -> gs.Sample:
    return gs.Sample(False, 503, 5.0, error="engine_unavailable")


# --- percentiles and summaries ---


def test_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(100, 0, -1)]  # 100..1, unsorted on purpose
    assert gs.percentile(values, 0.5) == 50.0
    assert gs.percentile(values, 0.99) == 99.0
    assert gs.percentile(values, 1.0) == 100.0
    assert gs.percentile([7.0], 0.99) == 7.0
    # 10 samples: p99 is the 10th, the slowest (no interpolation)
    assert gs.percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 50], 0.99) == 50
    with pytest.raises(ValueError):
        gs.percentile([], 0.5)


def test_summaries_leave_failures_out_of_the_percentiles_and_count_them():
    samples = [_ok(10.0, 4.0), _ok(20.0, 6.0), _failed(), _ok(30.0, None)]
    total = gs.summarize(samples, ttft=False)
    assert (total.n, total.errors, total.p50, total.p99) == (3, 1, 20.0, 30.0)
    assert total.mean == pytest.approx(20.0)
    # TTFT: a stream that never carried a token does not count as a time
    ttft = gs.summarize(samples, ttft=True)
    assert (ttft.n, ttft.errors, ttft.p50, ttft.p99) == (2, 2, 4.0, 6.0)


# --- traces ---


def test_zipf_weights_fall_with_rank_and_sum_to_one():
    weights = gs.zipf_weights(16, 1.1)
    assert sum(weights) == pytest.approx(1.0)
    assert weights == sorted(weights, reverse=True)
    assert weights[0] / weights[1] == pytest.approx(2**1.1)


def test_a_trace_is_the_same_for_the_same_seed_and_skewed():
    a = gs.zipf_trace(2000, 16, 1.1, seed=3)
    assert a == gs.zipf_trace(2000, 16, 1.1, seed=3)
    assert a != gs.zipf_trace(2000, 16, 1.1, seed=4)
    assert set(a) <= set(range(16))
    assert a.count(0) > a.count(1) > a.count(15)


def test_poisson_arrivals_start_at_zero_rise_and_keep_the_rate():
    times = gs.poisson_arrivals(4000, 4.0, seed=1)
    assert times[0] == 0.0
    assert all(b > a for a, b in zip(times, times[1:], strict=False))
    assert times == gs.poisson_arrivals(4000, 4.0, seed=1)
    assert len(times) / times[-1] == pytest.approx(4.0, rel=0.1)


# --- reading streams ---


def _event(payload: object) -> bytes:
    return b"data: " + orjson.dumps(payload)


@pytest.mark.parametrize(
    ("event", "carries"),
    [
        (_event({"choices": [{"delta": {"role": "assistant", "content": ""}}]}), False),
        (_event({"choices": [{"delta": {"content": "Tea"}}]}), True),
        (_event({"choices": [{"text": " is"}]}), True),
        (_event({"choices": [], "usage": {"completion_tokens": 4}}), False),
        (b"data: [DONE]", False),
        (b": keep-alive", False),
        (b"data: {not json", False),
        (_event(["a", "list"]), False),
    ],
)
def test_first_token_is_the_first_event_with_text(event, carries):
    assert gs.first_token_at(event) is carries


def test_cpu_seconds_reads_this_process_and_ignores_a_missing_one():
    assert gs.cpu_seconds(__import__("os").getpid()) > 0
    assert gs.cpu_seconds(2**22 + 12345) == 0.0  # above pid_max: never a live process


# --- the load generator against the stub engine (two local processes, no engine) ---


def test_the_raw_client_gets_the_stubs_replies_over_keep_alive(tmp_path: Path):
    import asyncio

    proc, base = gs.start_stub(tmp_path / "stub.log", cpus=None)
    try:
        target = gs.Target("direct", base, "some-model", {"authorization": "Bearer x"})
        body = gs.request_body(target, chat=True, stream=False, max_tokens=1, text="hi")
        samples, _ = asyncio.run(
            gs.raw_closed_loop(
                target,
                path="/v1/chat/completions",
                body=body,
                count=40,
                concurrency=4,
                deadline_s=60,
            )
        )
    finally:
        gs.stop_group(proc)
    assert len(samples) == 40 and all(s.ok and s.status == 200 for s in samples)
    reply = orjson.loads(gs.stub_response(body).split(b"\r\n\r\n", 1)[1])
    assert reply["model"] == "some-model" and reply["choices"][0]["message"]["content"]


def test_the_raw_client_reads_a_chunked_stream_and_finds_the_first_token():
    import asyncio

    events = [
        _event({"choices": [{"delta": {"role": "assistant", "content": ""}}]}),
        _event({"choices": [{"delta": {"content": "Tea"}}]}),
        b"data: [DONE]",
    ]
    chunks = b"".join(f"{len(e) + 2:x}\r\n".encode() + e + b"\n\n\r\n" for e in events)
    reply = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"

    async def go() -> tuple[int, bool, bytes, float | None]:
        reader = asyncio.StreamReader()
        reader.feed_data(reply)
        reader.feed_eof()
        return await gs.RawClient("http://127.0.0.1:1")._response(reader, True, 0.0)

    status, close, data, ttft = asyncio.run(go())
    assert (status, close) == (200, False)
    assert data.count(b"data:") == 3 and ttft is not None


# --- the overhead report ---


def _summary(p50: float, p99: float, errors: int = 0) -> gs.Summary:
    return gs.Summary(n=300, errors=errors, p50=p50, p99=p99, mean=p50)


def _overhead(gateway_add: float = 0.8, gateway_cpu: float = 2.0) -> overhead.OverheadResult:
    latency = {
        label: {
            "direct": _summary(10.0, 20.0),
            "gateway": _summary(10.0 + gateway_add, 20.0 + 3 * gateway_add),
            "litellm": _summary(16.0, 40.0, errors=1),
        }
        for label, *_ in overhead.KINDS
    }
    throughput = [
        overhead.Throughput("direct", "engine", 2000, 0, 40.0, None),
        overhead.Throughput("gateway", "engine", 2000, 0, 40.0, gateway_cpu),
        overhead.Throughput("litellm", "engine", 2000, 0, 40.0, 16.0),
        overhead.Throughput("direct", "stub", 2000, 0, 0.5, None),
        overhead.Throughput("gateway", "stub", 2000, 0, 2 * gateway_cpu, 2 * gateway_cpu),
        overhead.Throughput("litellm", "stub", 2000, 0, 20.0, 20.0),
    ]
    return overhead.OverheadResult(
        latency=latency,
        throughput=throughput,
        requests=300,
        load_requests=2000,
        stub_requests=2000,
        concurrency=16,
        litellm_version="1.108.7",
        machine="2 cores",
        seconds=300.0,
        engine_start_s=40.0,
    )


def test_throughput_per_core_is_requests_over_the_proxys_cpu_seconds():
    row = overhead.Throughput("gateway", "engine", 2000, 100, 40.0, 5.0)
    assert row.rps == pytest.approx(1900 / 40)
    assert row.rps_per_core == pytest.approx(1900 / 5)
    assert row.busy == pytest.approx(5 / 40)
    assert row.cpu_ms_per_request == pytest.approx(2.5)
    direct = overhead.Throughput("direct", "engine", 2000, 0, 40.0, None)
    assert direct.rps_per_core is None and direct.busy is None


def test_overhead_goals_met_and_missed():
    good = _overhead(gateway_add=0.8, gateway_cpu=2.0)  # engine: 1000 vs 125 req/s per core
    assert good.added("chat", "gateway") == pytest.approx((0.8, 2.4))
    assert good.rps_ratio("engine") == pytest.approx(8.0)
    assert good.rps_ratio("stub") == pytest.approx(5.0)  # 500 vs 100 req/s, both saturated
    assert [met for *_, met in good.goals()] == [True, True, True, True]

    slow = _overhead(gateway_add=4.0, gateway_cpu=10.0)  # p50 +4, p99 +12, 1.6x and 1x
    assert [met for *_, met in slow.goals()] == [False, False, False, False]
    assert good.load("gateway", "nowhere") is None and good.rps_ratio("nowhere") is None


def test_the_paired_estimate_follows_the_gateway_not_the_engines_mode_share():
    """The engine's TTFT is bimodal (one step or two): when its share of slow rounds moves
    past half, the difference of the two p50s jumps by the gap between the modes; the median of
    per-round differences stays at what the gateway adds (here 1 ms)."""

    def run(slow_rounds: set[int]) -> tuple[float, float | None]:
        engine = [5.0 + (14.0 if i in slow_rounds else 0.0) for i in range(100)]
        direct = [gs.Sample(True, 200, e + 1, e) for e in engine]
        # the gateway's request of the same round lands in the same mode, except round 0's
        gateway = [
            gs.Sample(True, 200, e + 2, e + 1 + (14.0 if i == 0 else 0.0))
            for i, e in enumerate(engine)
        ]
        p50s = gs.percentile([g.ttft_ms or 0.0 for g in gateway], 0.5) - gs.percentile(engine, 0.5)
        return p50s, overhead.paired_added(direct, gateway, ttft=True)

    # 50 slow rounds of 100 (round 0 fast for the engine): the p50s differ by 15 ms
    assert run(set(range(1, 51))) == pytest.approx((15.0, 1.0))
    assert run(set(range(1, 40))) == pytest.approx((1.0, 1.0))
    failed = [gs.Sample(False, 503, 1.0)]
    assert overhead.paired_added(failed, failed, ttft=False) is None


@pytest.mark.parametrize("names", [["d", "g"], ["d", "g", "l"], ["a", "b", "c", "d"]])
def test_in_the_send_order_every_target_follows_every_target_once(names):
    cycle = overhead.send_order(names)
    # Round the cycle's end too: cycles follow one another.
    pairs = Counter(zip(cycle, cycle[1:] + cycle[:1], strict=True))
    assert set(pairs) == {(a, b) for a in names for b in names}
    assert set(pairs.values()) == {1}
    # A rotation (d g l, g l d, l d g) fails this: the gateway would follow the engine twice.
    rotation = ["d", "g", "l", "g", "l", "d", "l", "d", "g"]
    assert Counter(zip(rotation, rotation[1:] + rotation[:1], strict=True))[("d", "g")] == 2


def test_the_paired_goal_joins_the_goals_when_measured():
    result = _overhead(gateway_add=0.8, gateway_cpu=2.0)
    result.paired = {"chat": {"gateway": 0.7}, "chat, streaming": {"gateway": 2.5}}
    goals = result.goals()
    assert goals[1] == (
        "added per request, median over rounds < 2 ms (worst kind)",
        "2.50 ms",
        False,
    )
    assert (
        "| chat (max_tokens 1) | total | 10.00 / 20.00 | 10.80 / 22.40 | **+0.80 / +2.40** | +0.70 |"
        in overhead.render(result, "x")
    )


def test_overhead_report_has_the_numbers_and_the_verdicts(tmp_path: Path):
    text = overhead.render(_overhead(gateway_add=4.0), "python -m bench.gateway_overhead")
    assert text.startswith(overhead.BEGIN) and text.rstrip().endswith(overhead.END)
    assert "`python -m bench.gateway_overhead`" in text
    assert (
        "| chat (max_tokens 1) | total | 10.00 / 20.00 | 14.00 / 32.00 | **+4.00 / +12.00**" in text
    )
    assert "| completions, streaming (max_tokens 4) | TTFT |" in text
    assert "0/0/1 |" in text  # LiteLLM's failed request is counted
    assert "| engine | gateway | 2000 (0) | 40.0 | 50 | 1.000 | 5% | 1000 |" in text
    assert "| stub | gateway | 2000 (0) | 4.0 | 500 | 2.000 | 100% | 500 |" in text
    assert "| added p50 < 2 ms (worst kind) | 4.00 ms | NO |" in text
    assert "per second per core (saturated, stub engine) | 5.00x | yes |" in text
    assert "per second per core (real engine) | 8.00x | yes |" in text

    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    write_section("gateway-overhead", text, doc=doc)
    write_section("gateway-overhead", text, doc=doc)  # rewritten in place, not appended
    assert doc.read_text().count(overhead.BEGIN) == 1


# --- the routing report ---


def _replay(
    choice: str, ttfts: list[float], loads: int, failed: int = 0, rate: float = 4.0
) -> routing.Replay:
    error = '{"error":{"message":"No engine","code":"engine_unavailable"}}'
    samples = [_ok(t + 50, t) for t in ttfts] + [
        gs.Sample(False, 503, 5.0, error=error) for _ in range(failed)
    ]
    ranks = [i % 16 for i in range(len(samples))]
    return routing.Replay(
        choice=choice,
        rate=rate,
        samples=samples,
        ranks=ranks,
        loads=loads,
        load_failures=0,
        evictions=loads - 6,
        load_ms=[100.0, 200.0, 300.0],
        served_from={"gpu": 80, "cpu": 5, "cold": loads},
        seconds=100.0,
    )


def test_routing_sums_by_popularity_and_compares():
    replay = _replay("policy", [float(t) for t in range(1, 101)], loads=20, failed=2)
    assert replay.ttft.p99 == 99.0 and replay.ttft.errors == 2
    top = replay.ttft_for({0, 1})  # ranks 0 and 1: samples 1, 2, 17, 18, ...
    assert top is not None and top.n == 14
    assert replay.ttft_for({99}) is None
    assert routing.change(20, 40) == pytest.approx(-0.5)
    assert routing.change(5, 0) == 0.0


def test_routing_report_has_both_replays_and_the_comparison():
    result = routing.RoutingResult(
        replays=[
            _replay("policy", [100.0] * 98 + [900.0, 1000.0], loads=20),
            _replay("round_robin", [300.0] * 98 + [1800.0, 2000.0], loads=40, failed=3),
            _replay("policy", [50.0] * 100, loads=10, rate=1.5),  # no round-robin at 1.5/s
        ],
        requests=400,
        rates=[1.5, 4.0],
        adapters=16,
        zipf=1.1,
        seed=1,
        top_share=0.31,
        distinct=16,
        machine="2 cores",
        seconds=600.0,
        engine_start_s=[60.0, 62.0],
    )
    text = routing.render(result, "python -m bench.gateway_routing")
    assert text.startswith(routing.BEGIN) and text.rstrip().endswith(routing.END)
    assert "| 4 | policy | 100 (0) | **20** | 0 | 14 | 80 / 5 / 20 | 200 | 100 | **900** |" in text
    assert "| 4 | round_robin | 100 (3) | **40** |" in text
    assert "| 1.5 | policy | 100 (0) | **10** |" in text
    assert "- 4/s, policy against round-robin: cold loads 20 vs 40 (-50%), TTFT p99 900 vs " in text
    assert "1.5/s, policy against" not in text  # nothing to compare with
    assert "- Failed at 4/s, round_robin: 3 `engine_unavailable`." in text
    assert "FLEET_AUTO_PINS" in text


def test_replays_alternate_their_order_by_rate():
    assert routing.replay_order(["policy", "round_robin"], 0) == ["policy", "round_robin"]
    assert routing.replay_order(["policy", "round_robin"], 1) == ["round_robin", "policy"]
    assert routing.replay_order(["policy", "round_robin"], 2) == ["policy", "round_robin"]


def test_failure_reasons_are_the_gateways_error_codes():
    samples = [
        _ok(1.0, 1.0),
        gs.Sample(False, 503, 1.0, error='{"error":{"code":"adapter_load_failed"}}'),
        gs.Sample(False, 503, 1.0, error='{"error":{"code": "adapter_load_failed"}}'),
        gs.Sample(False, 0, 1.0, error="ReadTimeout()"),
    ]
    assert routing.failure_reasons(samples) == {"adapter_load_failed": 2, "ReadTimeout()": 1}


def test_profile_breakdown_sums_the_parts_and_spreads_the_cpu():
    site = "/x/site-packages/"
    stats: dict[tuple[str, int, str], tuple[Any, ...]] = {
        (site + "uvicorn/protocols/http/httptools_impl.py", 1, "run_asgi"): (0, 0, 0.1, 8.0, {}),
        ("/repo/gateway/app.py", 10, "__call__"): (0, 0, 0.1, 7.5, {}),
        ("/repo/gateway/app.py", 20, "forward"): (0, 0, 0.5, 5.0, {}),
        (site + "aiohttp/client.py", 30, "_request"): (0, 0, 0.2, 3.0, {}),
        (site + "aiohttp/client.py", 40, "_request"): (0, 0, 0.2, 1.0, {}),  # same name, summed
        ("/repo/gateway/recorder.py", 50, "flush"): (0, 0, 0.1, 0.5, {}),
        ("/repo/other.py", 60, "forward"): (0, 0, 9.0, 9.0, {}),  # another file: not counted
    }
    lines = overhead.profile_breakdown(stats, 10.0, 1000, 4.0)
    assert "| everything (profile total) | 10.00 | 100% | 4.00 |" in lines
    assert "| outside requests: event loop, socket I/O, HTTP parsing | 1.50 | 15% | 0.60 |" in lines
    assert "| - forward: engine round trip and relay | 5.00 | 50% | 2.00 |" in lines
    assert "| -- aiohttp request (request, reply head) | 4.00 | 40% | 1.60 |" in lines
    assert "| - choose: engine choice | 0.00 | 0% | 0.00 |" in lines


def test_the_raw_client_sends_again_once_on_a_kept_alive_connection_the_server_closed():
    import asyncio

    served: list[int] = []

    async def go() -> tuple[gs.Sample, gs.Sample, gs.Sample]:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            # one reply per connection, then the server closes it (as an idle timeout would)
            await reader.readuntil(b"\r\n\r\n")
            served.append(1)
            writer.write(gs.stub_response(b""))
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            client = gs.RawClient(f"http://127.0.0.1:{port}")
            request = client.request_bytes("/v1/chat/completions", {}, b"")
            first = await client.send(request, stream=False)
            await asyncio.sleep(0.2)  # the server has closed the kept-alive connection
            second = await client.send(request, stream=False)
            await client.close()
            server.close()
            refused = await gs.RawClient(f"http://127.0.0.1:{port}").send(request, stream=False)
        return first, second, refused

    first, second, refused = asyncio.run(go())
    assert first.ok and second.ok and len(served) == 2
    assert not refused.ok and refused.status == 0


def test_a_saved_result_renders_the_same_again(tmp_path: Path):
    import json
    from dataclasses import asdict

    result = _overhead()
    (tmp_path / "result.json").write_text(json.dumps(asdict(result), default=str))
    again = overhead.load_result(tmp_path)  # no gateway.prof here: no profile section
    assert overhead.render(again, "cmd") == overhead.render(result, "cmd")


def test_a_saved_routing_result_renders_the_same_again(tmp_path: Path):
    import json
    from dataclasses import asdict

    result = routing.RoutingResult(
        replays=[_replay("policy", [100.0] * 10, loads=20, failed=1)],
        requests=11,
        rates=[4.0],
        adapters=16,
        zipf=1.1,
        seed=1,
        top_share=0.3,
        distinct=9,
        machine="2 cores",
        seconds=60.0,
        engine_start_s=[60.0, 61.0],
        notes=["An earlier run said otherwise."],
    )
    (tmp_path / "result.json").write_text(json.dumps(asdict(result), default=str))
    again = routing.load_result(tmp_path)
    assert routing.render(again, "cmd") == routing.render(result, "cmd")
    assert "An earlier run said otherwise." in routing.render(again, "cmd")
