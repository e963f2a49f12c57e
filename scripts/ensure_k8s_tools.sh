#!/usr/bin/env bash
# kubectl with its built-in kustomize, for the manifest tests (tests/deploy). Any kubectl that can
# `kubectl kustomize` will do; otherwise Debian's (package kubernetes-client: kubectl 1.20 with
# kustomize v2.0.3, which deploy/k8s is written for too). The schemas come with
# kubernetes-validate (requirements.txt). Idempotent.
set -euo pipefail
if command -v kubectl >/dev/null && kubectl kustomize --help >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
  echo "kubectl is missing; install Debian's kubernetes-client (needs root)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq kubernetes-client >/dev/null
