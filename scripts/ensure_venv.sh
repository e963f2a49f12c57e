#!/usr/bin/env bash
# The portal's virtualenv from requirements-dev.txt (what the portal runs on, requirements.txt, and
# the tools that test it); a no-op when neither file has changed.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -r requirements-dev.txt
echo "$want" > "$stamp"
