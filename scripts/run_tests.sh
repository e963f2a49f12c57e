#!/usr/bin/env bash
# Runs the type check and every test. PostgreSQL, Redis and the tiny model must exist (the
# Makefile sees to that); the test session itself starts the two CPU vLLM engines and the S3 server.
#
# pytest runs on two pytest-xdist workers (PYTEST_WORKERS, 0 for none): most tests spend their
# time in one Python process or waiting on a real clock, so a second worker uses the second core.
# Every test that uses the engines runs on one worker (tests/conftest.py groups them), and each
# worker has its own test database, Redis database and var/ folder (tests/paths.py).
set -uo pipefail
cd "$(dirname "$0")/.."
# mypy over the whole tree (pyproject.toml [tool.mypy]) beside the tests (they spend much of
# their time waiting on engines and services); its report is printed after theirs, and a type
# error fails the run.
mypy_log=$(mktemp)
.venv/bin/python -m mypy >"$mypy_log" 2>&1 &
mypy_pid=$!

# The host's share of the CPU (steal) and the load, printed at the end: a slow run says whether the
# machine was slow or the tests were.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$5+$6+$7+$8+$9, $9}' /proc/stat; }
read -r total_before steal_before < <(cpu_ticks)

workers=${PYTEST_WORKERS:-2}
parallel=()
if [ "$workers" != "0" ]; then
  parallel=(-n "$workers" --dist loadgroup)
fi
started=$(date +%s)
.venv/bin/python -m pytest "${parallel[@]}" "$@"
rc=$?
wait "$mypy_pid"
typed=$?
cat "$mypy_log"
rm -f "$mypy_log"
read -r total_after steal_after < <(cpu_ticks)
ticks=$(( total_after - total_before ))
echo "make test: pytest exit $rc after $(( $(date +%s) - started ))s on $workers workers;" \
  "CPU stolen by the host: $(( ticks > 0 ? (steal_after - steal_before) * 100 / ticks : 0 ))%;" \
  "load $(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$typed" != "0" ]; then
  echo "make test: mypy exit $typed (type errors above): the run fails"
  exit 1
fi
# pytest's 5 means no test ran: that is a failure here, not a success.
[ "$rc" = "5" ] && exit 1
exit "$rc"
