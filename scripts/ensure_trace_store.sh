#!/usr/bin/env bash
# The trace store `make run` starts: Arize Phoenix (PyPI, pinned), an OpenTelemetry trace store
# with a web UI that receives OTLP over HTTP (/v1/traces) and gRPC, in a virtualenv of its own so
# its dependency tree never reaches the portal's. Idempotent: a stamp records the spec and this
# script's hash. Usage: scripts/ensure_trace_store.sh [VENV_DIR]  (default: <repo>/.venv-traces)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-traces}"
python="${PYTHON:-python3.11}"
spec="arize-phoenix==20.26.1"
stamp="$venv/.portal-traces-stamp"

want="$( (echo "$spec"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -d' ' -f1)"
if [[ -x "$venv/bin/phoenix" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating the trace store's venv: $venv"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q "$spec"
"$venv/bin/python" -c "import phoenix.server.main" >/dev/null  # fail here, not under honcho
echo "$want" > "$stamp"
echo "trace store ready: $venv ($spec)"
