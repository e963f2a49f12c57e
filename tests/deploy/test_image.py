"""The portal's image (deploy/Containerfile), when `make image` has built it on this machine:
it runs as a non-root user, carries its HEALTHCHECK, and `manage.py check --deploy` passes inside
it with the environment the dev overlay gives the web container. Building takes 3.5-11 minutes on
2 cores, too long for every `make test`, so this runs only when the image exists."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.deploy.manifests import containers, render
from tests.deploy.rules import container_env

IMAGE = "localhost/lora-portal:dev"


def _image_exists() -> bool:
    if shutil.which("podman") is None or shutil.which("buildah") is None:
        return False
    return subprocess.run(["podman", "image", "exists", IMAGE], check=False).returncode == 0


pytestmark = pytest.mark.skipif(not _image_exists(), reason=f"no {IMAGE}: `make image` builds it")


def test_it_runs_as_a_user_and_has_a_healthcheck():
    inspected = subprocess.run(
        ["podman", "image", "inspect", IMAGE], capture_output=True, text=True, check=True
    )
    image = json.loads(inspected.stdout)[0]
    config = image["Config"]
    assert config["User"] == "10001:10001"
    assert image["Healthcheck"]["Test"] == ["CMD", "python", "/app/deploy/healthcheck.py"]
    assert not any(name.startswith(("SECRET_KEY=", "AUDIT_CHAIN_KEY=")) for name in config["Env"])


def test_check_deploy_passes_inside_it():
    objects = render("dev")
    web = next(c for c in containers(objects) if c.role == "web")
    env, problems = container_env(web, objects)
    assert problems == []
    # buildah's chroot isolation: podman's OCI runtime cannot set up cgroups in this machine's
    # own container (crun: "cgroups in hybrid mode not supported").
    container = subprocess.run(
        ["buildah", "from", "--quiet", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        flags = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
        result = subprocess.run(
            ["buildah", "run", "--isolation", "chroot", "--user", "10001:10001", *flags,
             container, "--", "/app/deploy/entrypoint.sh", "manage", "check", "--deploy"],
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified" in result.stdout + result.stderr
