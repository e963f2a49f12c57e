#!/usr/bin/env bash
# Headless Chromium and its driver from Debian's packages, for the browser tests. Idempotent.
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "chromium is missing; install Debian's chromium and chromium-driver (needs root)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
