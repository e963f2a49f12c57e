"""What each fault test measured, kept for docs/reliability.md (rendered by
`python -m tests.faults.reliability_doc`, `make reliability-doc`).

Record format: one JSON object per fault, in `var/faults/<fault>.json` (written again by each run
of the test; the directory is FAULT_RECORDS_DIR when set). Keys:

- `fault` (str): a stable id, also the file name, e.g. "postgres-connections-cut";
- `title` (str): the fault as a row of the table names it ("PostgreSQL: every connection cut");
- `part` (str): "portal", "workers", "gateway", "engine", "storage" (rows are grouped by it);
- `caller_saw` (str): what a caller got meanwhile, from the test's own observations, e.g.
  "503 JSON `service.database_unavailable` in 0.02 s (3 of 3 requests)";
- `heal_s` (float | null): seconds from the part's return to the first good answer, with no hand;
- `lost` (str): what was lost or doubled, from counts the test compared (versions, approvals,
  releases, audit events, usage rows; the audit chain's verdict), e.g. "nothing: 14 audit
  events before, 14 after, chain verifies";
- `test` (str): the pytest node id that measured it;
- `measured_at` (str): ISO 8601 UTC.

The gateway's fault tests (tests/faults/test_gateway_*.py) write the same records with
part "gateway"; nothing else needs to change for their rows to appear.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tests.paths import REPO


def records_dir() -> Path:
    return Path(os.environ.get("FAULT_RECORDS_DIR", REPO / "var" / "faults"))


@dataclass
class FaultRecord:
    fault: str
    title: str
    part: str
    caller_saw: str = ""
    heal_s: float | None = None
    lost: str = ""
    test: str = ""
    measured_at: str = field(
        default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds")
    )

    def write(self) -> Path:
        folder = records_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{self.fault}.json"
        path.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        return path


def read_records(folder: Path | None = None) -> list[FaultRecord]:
    folder = folder or records_dir()
    if not folder.is_dir():
        return []
    return [
        FaultRecord(**json.loads(path.read_text(encoding="utf-8")))
        for path in sorted(folder.glob("*.json"))
    ]


class Stopwatch:
    """Seconds since start, for heal times measured by polling."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 2)


def wait_until(check, *, timeout: float, interval: float = 0.1, what: str = "") -> float:
    """Poll `check` until it returns truthy; the seconds it took. A bound, not a judgement:
    the tests assert what happened, and this only stops a hung wait."""
    watch = Stopwatch()
    while True:
        if check():
            return watch.elapsed()
        if watch.elapsed() > timeout:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(interval)
