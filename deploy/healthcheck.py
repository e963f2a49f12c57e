"""The image's HEALTHCHECK (podman, docker; Kubernetes uses its own probes): the HTTP processes
must answer /healthz with 200; the others are healthy while they run (PID 1 is then alive)."""

import os
import sys
import urllib.error
import urllib.request
from pathlib import Path


def main() -> int:
    command = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    if not any(part.endswith(b"uvicorn") for part in command):
        return 0
    request = urllib.request.Request(
        f"http://127.0.0.1:{os.environ.get('PORT', '8000')}/healthz",
        # An allowed host (deploy/k8s/base/kustomization.yaml puts localhost in ALLOWED_HOSTS for
        # the probes).
        headers={"Host": "localhost"},
    )
    try:
        with urllib.request.urlopen(request, timeout=4) as response:  # noqa: S310 (loopback)
            return 0 if response.status == 200 else 1
    except (urllib.error.URLError, OSError):
        return 1


if __name__ == "__main__":
    sys.exit(main())
