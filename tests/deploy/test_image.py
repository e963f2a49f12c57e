"""The portal's image (deploy/Containerfile), when `make image` has built it on this machine:
it runs as a non-root user, carries its HEALTHCHECK, `manage.py check --deploy` passes inside
it with the environment the dev overlay gives the web container, and the migrate process migrates
an empty PostgreSQL database with the migrate Job's environment. Building takes 3.5-11 minutes on
2 cores, too long for every `make test`, so this runs only when the image exists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from urllib.parse import urlsplit

import psycopg
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


def _run_in_image(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The entry point with these arguments inside the image, as user 10001, on the host's
    network. buildah's chroot isolation: podman's OCI runtime cannot set up cgroups in this
    machine's own container (crun: "cgroups in hybrid mode not supported")."""
    container = subprocess.run(
        ["buildah", "from", "--quiet", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        flags = [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]
        return subprocess.run(
            ["buildah", "run", "--isolation", "chroot", "--network", "host",
             "--user", "10001:10001", *flags, container, "--", "/app/deploy/entrypoint.sh", *args],
            capture_output=True,
            text=True,
            timeout=600,
        )  # fmt: skip
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def _role_env(role: str) -> dict[str, str]:
    objects = render("dev")
    container = next(c for c in containers(objects) if c.role == role)
    env, problems = container_env(container, objects)
    assert problems == []
    return env


def test_check_deploy_passes_inside_it():
    result = _run_in_image(_role_env("web"), "manage", "check", "--deploy")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified" in result.stdout + result.stderr


@pytest.fixture
def empty_database():
    """A new PostgreSQL database on the test run's server, dropped afterwards."""
    url = urlsplit(os.environ.get("DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres"))
    name = f"image_migrate_{uuid.uuid4().hex[:8]}"
    admin = f"{url.scheme}://{url.netloc}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgres://{url.netloc}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_migrate_process_migrates_inside_it(empty_database):
    env = {**_role_env("migrate"), "DATABASE_URL": empty_database}
    result = _run_in_image(env, "migrate")
    assert result.returncode == 0, result.stdout + result.stderr
    with psycopg.connect(empty_database) as conn:
        applied = conn.execute(
            "SELECT app, count(*) FROM django_migrations GROUP BY app"
        ).fetchall()
        triggers = conn.execute(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'portal_auditevent'::regclass"
            " AND NOT tgisinternal"
        ).fetchone()
    apps: dict[str, int] = dict(applied)
    assert {"tenants", "adapters", "workers", "gateway", "portal"} <= set(apps), apps
    # The audit table's append-only triggers come with the migrations.
    assert triggers is not None and triggers[0] > 0
