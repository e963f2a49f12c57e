#!/usr/bin/env bash
# See scripts/ensure_debian_tools.sh.
exec "$(dirname "$0")/ensure_debian_tools.sh" chromium
