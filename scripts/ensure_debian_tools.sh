#!/usr/bin/env bash
# Debian's tools the tests use, installed in one apt transaction (one `apt-get update`, one
# install) where any is missing. Idempotent: a no-op when every named tool is there.
#   chromium  headless Chromium and its driver (packages chromium, chromium-driver): browser tests
#   promtool  Debian's prometheus package (2.42; its promtool checks and unit-tests the rules in
#             docs/alerts/ like any later one)
#   kubectl   any kubectl that can `kubectl kustomize`, else Debian's kubernetes-client (kubectl 1.20
#             with kustomize v2.0.3, which deploy/k8s is written for too): the manifest tests
# Usage: scripts/ensure_debian_tools.sh [chromium] [promtool] [kubectl]   (default: all three)
set -euo pipefail
wanted=("${@:-chromium promtool kubectl}")
read -r -a wanted <<<"${wanted[*]}"
missing=()  # with their recommended packages (Chromium's fonts)
lean=()     # without (prometheus would bring its exporters)
for tool in "${wanted[@]}"; do
  case "$tool" in
    chromium) [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] || missing+=(chromium chromium-driver) ;;
    promtool) command -v promtool >/dev/null 2>&1 || lean+=(prometheus) ;;
    kubectl) command -v kubectl >/dev/null 2>&1 && kubectl kustomize --help >/dev/null 2>&1 || missing+=(kubernetes-client) ;;
    *) echo "ensure_debian_tools: unknown tool '$tool' (chromium, promtool, kubectl)" >&2; exit 2 ;;
  esac
done
all=("${missing[@]}" "${lean[@]}")
[ "${#all[@]}" -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ]; then
  echo "missing Debian packages: ${all[*]}; install them as root (apt-get install ${all[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
echo "installing Debian packages: ${all[*]}"
apt-get update -qq
[ "${#missing[@]}" -eq 0 ] || apt-get install -y -qq "${missing[@]}" >/dev/null
[ "${#lean[@]}" -eq 0 ] || apt-get install -y -qq --no-install-recommends "${lean[@]}" >/dev/null
