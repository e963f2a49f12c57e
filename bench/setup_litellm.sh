#!/usr/bin/env bash
# LiteLLM's proxy (PyPI, pinned) in its own virtualenv, for bench/gateway_overhead.py only: the
# comparison must never pull LiteLLM's dependency tree into the portal's venv.
# Idempotent: a stamp inside the venv records the pinned spec and this script's hash.
# Usage: bench/setup_litellm.sh [VENV_DIR]   (default: <repo>/.venv-litellm; PYTHON overrides python3.11)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-litellm}"
python="${PYTHON:-python3.11}"
# The version the numbers in docs/benchmarks.md were measured with; bump it on purpose only.
# (Newer releases need litellm-proxy / -extras / -enterprise builds the index here does not serve.)
spec="litellm[proxy]==1.108.7"
stamp="$venv/.portal-litellm-stamp"

want="$( (echo "$spec"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -d' ' -f1)"
if [[ -x "$venv/bin/litellm" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "litellm venv up to date: $venv"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating litellm venv: $venv"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q --upgrade pip
"${pip[@]}" install -q "$spec"

# Fail here, not in the middle of a benchmark, if the proxy cannot import.
LITELLM_LOCAL_MODEL_COST_MAP=True "$venv/bin/python" -c "import litellm.proxy.proxy_server" >/dev/null

echo "$want" > "$stamp"
echo "litellm venv ready: $venv ($("$venv/bin/python" -m pip show litellm | grep -i '^version'))"
