#!/usr/bin/env bash
# Runs every test. PostgreSQL, Redis and the tiny model must exist (the Makefile sees to that);
# the test session itself starts the two CPU vLLM engines and the S3-compatible server.
set -uo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
.venv/bin/python -m pytest "$@"
rc=$?
echo "make test: pytest exit $rc after $(( $(date +%s) - started ))s"
# pytest's 5 means no test ran: that is a failure here, not a success.
[ "$rc" = "5" ] && exit 1
exit "$rc"
