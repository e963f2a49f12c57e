#!/usr/bin/env bash
# `make image`: the portal's image (deploy/Containerfile) built with Debian's podman, FROM a local
# image made from a Debian root file system (debootstrap), so nothing comes from a container
# registry: only Debian's packages and PyPI. Needs root (debootstrap, podman). Prints the tag.
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${PORTAL_IMAGE:-localhost/lora-portal:dev}
base=localhost/lora-portal-debian:bookworm
rootfs=var/image/rootfs

if ! command -v podman >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" != "0" ]; then
    echo "podman and debootstrap are missing; install Debian's podman and debootstrap (needs root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq podman debootstrap >/dev/null
fi

if ! podman image exists "$base"; then
  if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
    rm -rf "$rootfs"
    mkdir -p "$(dirname "$rootfs")"
    # Debian's default mirror; minbase is what debian:bookworm-slim starts from too.
    debootstrap --variant=minbase bookworm "$rootfs" >var/image/debootstrap.log
  fi
  tar -C "$rootfs" -c . | podman import --quiet - "$base" >/dev/null
fi

# The host's CA bundle reaches pip as a build secret (in no layer), for TLS-inspecting proxies.
ca=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
podman build --quiet --format docker --isolation chroot --build-arg "BASE_IMAGE=$base" --secret "id=pip-ca,src=$ca" \
  -f deploy/Containerfile -t "$tag" . >/dev/null
echo "$tag"
