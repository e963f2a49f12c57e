"""The noisy-neighbour bench's report on made-up numbers (no engines, no database): phases run
several times in turn are pooled (every turn's samples in one percentile), the ratio to alone is
the pooled one's, and the section keeps its name however many turns ran."""

from __future__ import annotations

from bench import gateway_support as gs
from bench import neighbours as nb


def _phase(name: str, ttfts: list[float]) -> nb.PhaseResult:
    return nb.PhaseResult(
        name=name,
        b_ttft_p50_ms=gs.percentile(ttfts, 0.5),
        b_ttft_p99_ms=gs.percentile(ttfts, 0.99),
        b_requests=len(ttfts),
        b_status={"200": len(ttfts)},
        a_status={},
        b_ttfts_ms=ttfts,
    )


def _direct(name: str, ttfts: list[float]) -> nb.PhaseResult:
    phase = _phase(name, ttfts)
    phase.via = "direct"
    return phase


def _result(phases: list[nb.PhaseResult], repeat: int) -> nb.Result:
    return nb.Result(
        started_at="2026-12-06 00:00 UTC",
        machine="2 cores",
        phase_seconds=60,
        b_rate=4,
        phases=phases,
        repeat=repeat,
    )


def test_turns_of_a_phase_are_pooled_and_alone_is_the_pooled_one():
    # A turn of 100 samples has its 99th for p99; pooled, 200 samples have their 198th.
    alone = [_phase("alone", [10.0] * 98 + [30, 40]), _phase("alone", [10.0] * 98 + [20, 25])]
    evals = [_phase("eval", [12.0] * 98 + [14, 15]), _phase("eval", [12.0] * 98 + [50, 60])]
    rows = nb.pooled([alone[0], evals[0], alone[1], evals[1]])
    assert [(r.name, r.b_requests, r.b_status) for r in rows] == [
        ("alone", 200, {"200": 200}),
        ("eval", 200, {"200": 200}),
    ]
    assert [a.b_ttft_p99_ms for a in alone] == [30, 20]
    assert rows[0].b_ttft_p99_ms == 25 and rows[0].b_ttft_p50_ms == 10
    assert rows[1].b_ttft_p99_ms == 15 and rows[1].b_ttft_p50_ms == 12
    assert nb.pooled(alone[:1] + evals[:1]) == []  # one turn each: nothing to pool

    result = _result([alone[0], evals[0], alone[1], evals[1]], repeat=2)
    assert nb.section_name(result) == "neighbours-alone-eval"
    section = nb.render(result, "cmd")
    assert "| **eval** | all its turns, pooled | 12 ms | 15 ms | 0.60x |" in section
    assert "| 12 ms | 50 ms | 2.00x |" in section  # the second turn, against alone pooled
    assert "the phases 2 times in turn" in section


def test_a_single_turn_reads_as_before():
    result = _result([_phase("alone", [10.0, 20.0]), _phase("eval", [10.0, 25.0])], repeat=1)
    section = nb.render(result, "cmd")
    assert "pooled" not in section and "in turn" not in section
    assert "25 ms | 1.25x |" in section


def test_lane_reference_rows_stand_against_quiet_and_beside_the_eval_phase():
    gateway = [_phase("alone", [10.0] * 98 + [20, 20]), _phase("eval", [10.0] * 98 + [30, 30])]
    turns = [
        _direct("quiet", [8.0] * 98 + [10, 10]),
        _direct("busy", [8.0] * 98 + [15, 16]),
        _direct("quiet", [8.0] * 98 + [10, 10]),
        _direct("busy", [8.0] * 98 + [12, 12]),
    ]
    section = nb.render(_result(gateway + turns, repeat=2), "cmd")
    assert "`quiet` and `busy`" in section
    # busy's pooled p99 (the 198th of 200: 12) against quiet's pooled (10); eval's 30 against it.
    assert "| **busy**, pooled | 8 ms | 12 ms | 1.20x | 200: 200 | - | 2.50x |" in section
    assert "| busy | 8 ms | 15 ms | 1.50x |" in section  # one turn, against quiet pooled
    assert "| **quiet**, pooled | 8 ms | 10 ms | 1.00x |" in section


def test_the_busy_reference_sends_at_the_rate_the_eval_phases_reached():
    evals = [_phase("eval", [10.0]), _phase("eval", [10.0])]
    evals[0].a_status, evals[1].a_status = {"cases done": 600}, {"cases done": 900}
    # Each case asks both sides: 2 x 1,500 answers over two 60 s phases.
    assert nb.eval_answer_rate([_phase("alone", [10.0]), *evals], 60) == 25.0
    assert nb.eval_answer_rate([_phase("alone", [10.0])], 60) is None


def test_lane_phases_through_the_gateway_stand_against_quiet_and_keep_the_section_name():
    phases = [
        _phase("alone", [10.0] * 98 + [20, 20]),
        _phase("eval", [10.0] * 98 + [30, 30]),
        _phase("quiet", [10.0] * 98 + [40, 40]),
        _phase("busy", [10.0] * 98 + [50, 50]),
    ]
    result = _result(phases, repeat=1)
    assert nb.section_name(result) == "neighbours-alone-eval"  # the lanes are a reference
    section = nb.render(result, "cmd")
    assert "| eval | (B's own) an eval run of 500 cases | 10 ms | 30 ms | 1.50x |" in section
    assert "| busy | (anyone) the eval's load straight at the first engine" in section
    assert "| 10 ms | 50 ms | 1.25x |" in section  # busy against quiet, not against alone


def test_a_lane_reference_stands_beside_the_gateway_phase_of_its_own_name_when_it_ran():
    direct = [_direct("quiet", [10.0] * 98 + [20, 20]), _direct("busy", [10.0] * 98 + [25, 25])]
    gateway = [
        _phase("alone", [10.0] * 98 + [20, 20]),
        _phase("eval", [10.0] * 98 + [30, 30]),
        _phase("busy", [10.0] * 98 + [50, 50]),
    ]
    section = nb.render(_result(gateway + direct, repeat=1), "cmd")
    # The gateway's busy (50 ms) over this busy (25 ms), not the eval phase (30 ms).
    assert "| busy | 10 ms | 25 ms | 1.25x | 200: 100 | - | 2.00x |" in section
    # No gateway quiet ran: quiet stands beside alone (20 ms over 20 ms).
    assert "| quiet | 10 ms | 20 ms | 1.00x | 200: 100 | - | 1.00x |" in section


def test_runs_pool_every_turn_of_each_phase_against_its_quiet_row():
    def run(alone: list[float], evals: list[float], quiet: list[float], busy: list[float]):
        direct = [_direct("quiet", quiet), _direct("busy", busy)]
        return _result([_phase("alone", alone), _phase("eval", evals), *direct], repeat=1)

    first = run([10.0] * 99 + [20], [10.0] * 99 + [30], [5.0] * 100, [5.0] * 99 + [8])
    second = run([10.0] * 99 + [20], [10.0] * 99 + [22], [5.0] * 100, [5.0] * 100)
    table = nb.render_runs([first, second])
    # 200 samples: the 198th is the p99 (eval: 10 x 198, then 22 and 30).
    assert "| alone | gateway | 2 | 200 | 10 ms | 10 ms | 1.00x |" in table
    assert "| eval | gateway | 2 | 200 | 10 ms | 10 ms | 1.00x |" in table
    assert "| busy | direct | 2 | 200 | 5 ms | 5 ms | 1.00x |" in table
    third = run([10.0] * 98 + [20, 20], [10.0] * 98 + [30, 30], [5.0] * 100, [5.0] * 100)
    table = nb.render_runs([first, second, third])
    # 300 samples, the 297th: alone 20 (its last four are 20), eval 22 (then 30, 30, 30).
    assert "| eval | gateway | 3 | 300 | 10 ms | 22 ms | 1.10x |" in table


def _shadow(a_status: dict[str, int], b_ok: int = 100) -> nb.PhaseResult:
    phase = _phase("shadow", [10.0] * b_ok)
    phase.a_status = a_status
    return phase


def test_the_shadow_phases_extra_work_is_read_against_a_live_requests_and_pooled():
    turns = [
        _shadow(
            {
                "200": 100,
                "sampled": 11,
                "candidate asks": 10,
                "judge calls": 20,
                "skipped stale": 1,
                "engine requests": 230,
            }
        ),
        _shadow(
            {
                "200": 98,
                "429": 2,
                "sampled": 9,
                "candidate asks": 8,
                "judge calls": 16,
                "skipped no_room": 1,
            }
        ),
    ]
    rows = nb.extra_work([_phase("alone", [5.0]), *turns])
    assert [(r.label, r.live, r.sampled, r.asks, r.judge, r.skipped) for r in rows] == [
        ("turn 1", 100, 11, 10, 20, 1),
        ("turn 2", 98, 9, 8, 16, 1),
        ("**all turns**", 198, 20, 18, 36, 2),
    ]
    # The engines finished 230: 100 of A's and 100 of B's answered, 30 more.
    assert rows[0].engine_extra == 30
    assert rows[1].engine_extra is None and rows[2].engine_extra is None  # one turn unread
    assert rows[0].share(rows[0].asks) == 0.10

    result = _result([_phase("alone", [5.0] * 100), *turns], repeat=2)
    result.sample_share = 0.10
    lines = nb.render_extra_work(result)
    assert any(
        line.startswith(
            "| turn 1 | 100 | 11 | 10 | 20 | 1 | 90.9 % | 10.0 % | 30.0 % | 30 (30.0 %) |"
        )
        and line.endswith("| met |")
        for line in lines
    ), lines
    # 8 of 98: 8.2 %, under 9 %.
    assert any(line.startswith("| turn 2 |") and line.endswith("| not met |") for line in lines)
    assert nb.render_extra_work(_result([_phase("alone", [5.0])], repeat=1)) == []


def test_the_sampling_range_narrows_with_the_requests():
    low, high = nb.share_range(0.10, 100)
    assert round(low, 3) == 0.041 and round(high, 3) == 0.159
    low, high = nb.share_range(0.10, 3600)
    assert round(low, 3) == 0.090 and round(high, 3) == 0.110
    assert nb.share_range(0.10, 0) == (0.0, 1.0)


def test_a_p99_ratio_comes_with_its_bootstrap_interval_and_alones_against_itself():
    alone = [10.0 + (i % 50) for i in range(500)]
    slower = [t * 1.5 for t in alone]
    lo, hi = nb.p99_interval(slower, alone)
    assert 1.3 < lo <= 1.5 <= hi < 1.7
    own_lo, own_hi = nb.p99_interval(alone, alone)
    assert own_lo <= 1.0 <= own_hi
    result = _result([_phase("alone", alone), _phase("shadow", slower)] * 2, repeat=2)
    text = nb.render(result, "cmd")
    assert "shadow 1.50x (" in text and "Alone against itself: " in text


def test_the_timeline_finds_b_s_engine_and_the_shadow_work_beside_it():
    from bench.neighbours_timeline import attribute, engine_shares

    engines = ["nb-a", "nb-b"]

    def tick(at: float, b_on: int, judge_on: int | None, locked: int = 1) -> list[float]:
        # [time, worker CPU s, pass running] + per engine [B's live, candidate, background, A's]
        row = [at, at / 10, float(locked)]
        for i in range(2):
            row += [float(b_on == i), 0.0, float(judge_on == i), 0.0]
        return row

    beside = [tick(t / 100, 1, 1) for t in range(10)]
    slow = attribute(beside, engines, 0.0, 50)
    assert (slow.engine, slow.background_there, slow.judge_there) == ("nb-b", True, True)
    assert slow.pass_running and abs(slow.worker_cores - 0.1) < 1e-9
    apart = [tick(t / 100, 0, 1, locked=0) for t in range(10)]
    slow = attribute(apart, engines, 0.0, 50)
    assert (slow.engine, slow.background_there, slow.background_elsewhere) == ("nb-a", False, True)
    assert not slow.pass_running
    shares = engine_shares(apart, engines, [0.0], [50])
    assert shares["b_on"] == {"nb-a": 1} and shares["background_share"] == {"nb-a": 0, "nb-b": 1}
