"""`make test-stress`: the tests of real processes (engines, faults, browsers, sockets), run
several times in a row under CPU load, and every test that failed even once, listed.

A flaky test costs a whole CI run; this finds one before a change is submitted. The load is the
script's own: one busy process per core at normal priority, so the tests and the processes they
start get about half the machine, as on a loaded CI host; a test that waits on a clock instead
of a condition, or races a process it started, fails here first.

    python -m tests.stress                 # every real-process test, 3 rounds
    python -m tests.stress --changed main  # those in test files changed since `main`
    python -m tests.stress --rounds 5 tests/portal/test_live_catch_up.py

Exit 0 when every round passed, 1 when any test failed once, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "var" / "stress"
# What runs real processes: the engines, the fault suite, browsers, live sockets.
REAL_PROCESS_MARKS = "engine or browser"
REAL_PROCESS_PATHS = [
    "tests/faults",
    "tests/portal/test_live_metrics.py",
    "tests/portal/test_tenant_events_socket.py",
    "tests/portal/test_socket_abuse.py",
    "tests/gateway/test_playground_socket.py",
]


def _hog() -> None:
    while True:
        pass


def real_process_files() -> list[str]:
    """Test files that use engines or browsers (by marker) or are listed above."""
    found = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", REAL_PROCESS_MARKS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    files = {line.split("::", 1)[0] for line in found.splitlines() if "::" in line}
    for path in REAL_PROCESS_PATHS:
        target = REPO / path
        if target.is_dir():
            files.update(str(p.relative_to(REPO)) for p in target.glob("test_*.py"))
        elif target.exists():
            files.add(path)
    return sorted(files)


def changed_files(base: str) -> set[str]:
    names = subprocess.run(
        ["git", "diff", "--name-only", base, "--", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    untracked = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "tests"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return set(names) | set(untracked)


def failures(report: Path) -> list[str]:
    """The test ids that failed or errored in one round's JUnit report."""
    if not report.exists():
        return ["(no report: the round itself failed before running tests)"]
    out = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            out.append(f"{case.get('classname', '')}::{case.get('name', '')}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "paths", nargs="*", help="test files or ids (default: every real-process test)"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--changed", metavar="BASE", help="only real-process test files changed since BASE"
    )
    parser.add_argument(
        "--hogs", type=int, default=multiprocessing.cpu_count(), help="busy processes"
    )
    parser.add_argument("--workers", default=os.environ.get("PYTEST_WORKERS", "2"))
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds takes a whole number from 1")
    targets = list(args.paths)
    if not targets:
        targets = real_process_files()
        if args.changed:
            touched = changed_files(args.changed)
            targets = [t for t in targets if t in touched]
    if not targets:
        print("test-stress: no real-process test to run")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    parallel = [] if args.workers == "0" else ["-n", args.workers, "--dist", "loadgroup"]
    hogs = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(args.hogs)]
    for hog in hogs:
        hog.start()
    failed: Counter[str] = Counter()
    started = time.monotonic()
    try:
        for round_ in range(1, args.rounds + 1):
            report = OUT / f"round-{round_}.xml"
            report.unlink(missing_ok=True)
            print(
                f"test-stress: round {round_}/{args.rounds}, {len(targets)} files, {args.hogs} hogs",
                flush=True,
            )
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    *parallel,
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    f"--junitxml={report}",
                    *targets,
                ],
                cwd=REPO,
                check=False,
            )
            for test in failures(report):
                failed[test] += 1
    finally:
        for hog in hogs:
            hog.terminate()
    minutes = (time.monotonic() - started) / 60
    if not failed:
        print(f"test-stress: {args.rounds} rounds passed in {minutes:.1f} min, none failed")
        return 0
    print(f"test-stress: failed at least once in {args.rounds} rounds ({minutes:.1f} min):")
    for test, times in failed.most_common():
        print(f"  {times}/{args.rounds}  {test}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
