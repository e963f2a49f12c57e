#!/usr/bin/env bash
# promtool (Debian's prometheus package) for the alerting-rule tests in docs/alerts/. Idempotent:
# a no-op when promtool is already on PATH. Debian's package is 2.42; its promtool checks and
# unit-tests rules like any later one for what docs/alerts/ uses.
set -euo pipefail
if command -v promtool >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "promtool is missing; install Debian's prometheus package (needs root): scripts/ensure_promtool.sh" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null
