#!/usr/bin/env bash
# The portal's virtualenv from requirements.txt; a no-op when the requirements have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q -r requirements.txt
echo "$want" > "$stamp"
