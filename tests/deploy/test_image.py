"""The portal's image (deploy/Containerfile), when `make image` has built it on this machine:
it runs as a non-root user, carries its HEALTHCHECK, `manage.py check --deploy` passes inside
it with the environment the dev overlay gives the web container, the migrate process migrates
an empty PostgreSQL database (every app) with the migrate Job's environment, and the gateway
process answers an OpenAI-style request with a token issued inside the image. Building takes 3.5-11 minutes on
2 cores, too long for every `make test`, so this runs only when the image exists."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import uuid
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest
from django.conf import settings

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
    assert set(settings.INSTALLED_APPS) >= {"budgets", "evals"}
    local = {"tenants", "adapters", "workers", "budgets", "gateway", "evals", "portal"}
    assert local <= set(apps), apps
    # The audit table's append-only triggers come with the migrations.
    assert triggers is not None and triggers[0] > 0


# Run inside the image: a tenant, a member and an inference token, made by the image's own code;
# prints the token.
ISSUE_TOKEN = """
import secrets
from django.contrib.auth import get_user_model
from tenants.models import ApiToken, Membership, Tenant
from tenants.services.tokens import TOKEN_PREFIX, _hash_secret
tenant = Tenant.objects.create(slug="acme", name="Acme")
user = get_user_model().objects.create_user("alice")
Membership.objects.create(user=user, tenant=tenant, role="maintainer")
prefix, secret = secrets.token_hex(5), secrets.token_urlsafe(32)
ApiToken.objects.create(user=user, tenant=tenant, prefix=prefix,
                        secret_hash=_hash_secret(secret), scopes=["inference", "read"])
print(f"{TOKEN_PREFIX}{prefix}_{secret}")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_gateway_answers_a_request_inside_it(empty_database):
    redis_url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/15")
    env = {**_role_env("gateway"), "DATABASE_URL": empty_database, "REDIS_URL": redis_url}
    migrated = _run_in_image({**_role_env("migrate"), "DATABASE_URL": empty_database}, "migrate")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    issued = _run_in_image(env, "manage", "shell", "-c", ISSUE_TOKEN)
    assert issued.returncode == 0, issued.stdout + issued.stderr
    token = issued.stdout.strip().splitlines()[-1]
    port = _free_port()
    container = subprocess.run(
        ["buildah", "from", "--quiet", IMAGE], capture_output=True, text=True, check=True
    ).stdout.strip()
    flags = [arg for k, v in {**env, "PORT": str(port)}.items() for arg in ("-e", f"{k}={v}")]
    server = subprocess.Popen(
        ["buildah", "run", "--isolation", "chroot", "--network", "host",
         "--user", "10001:10001", *flags, container, "--", "/app/deploy/entrypoint.sh", "gateway"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        base = f"http://localhost:{port}"
        with httpx.Client(base_url=base, timeout=10) as client:
            for _ in range(600):  # until uvicorn listens (it prints when it does), at most 60 s
                if server.poll() is not None:
                    break
                try:
                    client.get("/healthz")
                    break
                except httpx.TransportError:
                    server_wait(server, 0.1)
            assert server.poll() is None, server.communicate()[0]
            refused = client.get("/v1/models")
            served = client.get("/v1/models", headers={"Authorization": f"Bearer {token}"})
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"], refused.json()
        assert served.status_code == 200, served.text
        assert served.json() == {"object": "list", "data": []}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def server_wait(server: subprocess.Popen[str], seconds: float) -> None:
    """Waits for the server process to end, at most `seconds` (a poll between connection tries
    that also returns at once when the process dies)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=seconds)
