#!/usr/bin/env bash
# Runs the type check and every test. PostgreSQL, Redis and the tiny model must exist (the
# Makefile sees to that); the test session itself starts the two CPU vLLM engines and the S3 server.
set -uo pipefail
cd "$(dirname "$0")/.."
# mypy over the whole tree (pyproject.toml [tool.mypy]); the tests still run when it fails, so one
# run shows both, but a type error fails the run.
.venv/bin/python -m mypy
typed=$?
started=$(date +%s)
.venv/bin/python -m pytest "$@"
rc=$?
echo "make test: pytest exit $rc after $(( $(date +%s) - started ))s"
if [ "$typed" != "0" ]; then
  echo "make test: mypy exit $typed (type errors above): the run fails"
  exit 1
fi
# pytest's 5 means no test ran: that is a failure here, not a success.
[ "$rc" = "5" ] && exit 1
exit "$rc"
