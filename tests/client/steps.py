"""Steps the CLI tests share: push a directory, and take a version through review and release."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.factories import adapter_files


def push(
    cli: Any,
    directory: Path,
    *,
    who: str = "bob",
    adapter: str = "acme/support",
    extra: tuple[str, ...] = (),
) -> Any:
    tenant, name = adapter.split("/")
    return cli("push", str(directory), "--tenant", tenant, "--adapter", name, *extra, who=who)


def pushed_and_validated(cli: Any, tmp_path: Path, seed: int = 1) -> str:
    """`push --wait` as bob; the version's TENANT/ADAPTER@N."""
    done = push(cli, adapter_files(tmp_path / f"a{seed}", seed=seed), extra=("--wait",))
    assert done.returncode == 0, (done.stdout, done.stderr)
    return str(done.stdout.splitlines()[0])


def released(cli: Any, tmp_path: Path, seed: int = 1) -> str:
    """Validated, approved by rita, released by alice, and `wait --until active` agrees."""
    ref = pushed_and_validated(cli, tmp_path, seed)
    assert cli("approve", ref, "--comment", "looks right", who="rita").returncode == 0
    assert cli("release", ref, "--comment", "ship it", who="alice").returncode == 0
    assert cli.json("wait", ref, "--until", "active", "--timeout", "60")["status"] == "active"
    return ref


def write_private_key(key: Any, path: Path) -> bytes:
    """A signing key as `push --sign` reads it (PEM, PKCS8); returns the public half's PEM."""
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
