"""Key discipline: only portal-built keys under allowed prefixes reach a backend."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from adapters.storage import (
    AdapterStorage,
    BadKey,
    LocalDiskStorage,
    quarantine_key,
    serving_key,
    validate_key,
)
from tests.storage.probes import leftovers

GOOD = quarantine_key("acme", "support", 1, "up1", "adapter_config.json")
SHA = "ab" * 32

ATTACKS = [
    "../etc/passwd",
    "quarantine/../serving/x",
    "quarantine/acme/../../../etc/passwd",
    "quarantine/./acme/x",
    "quarantine/..",
    "/etc/passwd",
    "/quarantine/acme/x",
    "//quarantine/acme/x",
    "quarantine//acme/x",
    "quarantine/acme/",
    "quarantine",
    "quarantine\\..\\serving\\x",
    "quarantine/acme\\x",
    "quarantine/acme/x\x00.json",
    "quarantine/acme/x\n",
    "quarantine/acme/.hidden",
    "quarantine/acme/.tmp-abc.part",
    "quarantine/acme/-rf",
    "quarantine/acme/na me",
    "quarantine/acme/caf\u00e9",
    "quarantine/acme/%2e%2e",
    "quarantine/acme/C:x",
    "quarantine/acme/~",
    "other/acme/x",
    "quarantinex/acme/x",
    "Quarantine/acme/x",
    "",
    "quarantine/" + "a" * 256,
    "quarantine/" + "/".join(["a" * 200] * 6),
]


@pytest.mark.parametrize("key", ATTACKS)
def test_validate_key_refuses(key: str) -> None:
    with pytest.raises(BadKey) as error:
        validate_key(key, ("quarantine/", "serving/"))
    assert error.value.code == "storage.bad_key"


@pytest.mark.parametrize("key", [None, b"quarantine/acme/x", 42])
def test_validate_key_refuses_non_strings(key: object) -> None:
    with pytest.raises(BadKey):
        validate_key(key, ("quarantine/",))


@pytest.mark.parametrize("key", ATTACKS + ["../x", "/abs"])
def test_every_operation_refuses_a_bad_key_before_touching_the_store(
    storage: AdapterStorage, key: str, tmp_path: Path
) -> None:
    storage.save_stream(GOOD, io.BytesIO(b"{}"), max_bytes=2)
    before = leftovers(storage)
    operations = [
        lambda: storage.save_stream(key, io.BytesIO(b"x"), max_bytes=1),
        lambda: storage.open(key),
        lambda: storage.exists(key),
        lambda: storage.size(key),
        lambda: storage.delete(key),
        lambda: storage.copy(GOOD, key),
        lambda: storage.copy(key, GOOD),
        lambda: storage.download_to(key, tmp_path / "out"),
        lambda: storage.verify_object(key, 2, SHA),
    ]
    for operation in operations:
        with pytest.raises(BadKey):
            operation()

    assert leftovers(storage) == before
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "prefix",
    [
        "quarantine",
        "quarantine/acme",
        "../",
        "/quarantine/",
        "quarantine//",
        "other/",
        "quarantine/../",
    ],
)
def test_listing_and_deleting_refuse_bad_prefixes(storage: AdapterStorage, prefix: str) -> None:
    with pytest.raises(BadKey):
        storage.list(prefix)
    with pytest.raises(BadKey):
        storage.delete_prefix(prefix)


def test_delete_prefix_refuses_a_whole_area(storage: AdapterStorage) -> None:
    storage.save_stream(GOOD, io.BytesIO(b"{}"), max_bytes=2)

    with pytest.raises(BadKey):
        storage.delete_prefix("quarantine/")

    assert storage.exists(GOOD)


def test_prefixes_come_from_configuration(tmp_path: Path) -> None:
    serving_only = LocalDiskStorage(tmp_path, allowed_prefixes=("serving/",))

    with pytest.raises(BadKey):
        serving_only.save_stream(GOOD, io.BytesIO(b"{}"), max_bytes=2)
    serving_only.save_stream(
        serving_key(SHA, "adapter_config.json"), io.BytesIO(b"{}"), max_bytes=2
    )


def test_quarantine_key_layout() -> None:
    assert (
        quarantine_key("acme", "support", 3, "0f1e", "adapter_model.safetensors")
        == "quarantine/acme/support/v3/0f1e/adapter_model.safetensors"
    )


@pytest.mark.parametrize(
    "args",
    [
        ("acme/evil", "support", 1, "u", "f"),
        ("acme", "..", 1, "u", "f"),
        ("acme", "support", 0, "u", "f"),
        ("acme", "support", True, "u", "f"),
        ("acme", "support", "1", "u", "f"),
        ("acme", "support", 1, "", "f"),
        ("acme", "support", 1, "u", "../f"),
        ("acme", "support", 1, "u", "a\\b"),
    ],
)
def test_quarantine_key_refuses_bad_parts(args: tuple) -> None:
    with pytest.raises(BadKey):
        quarantine_key(*args)


def test_serving_key_is_content_addressed() -> None:
    assert serving_key(SHA, "adapter_model.safetensors") == (
        f"serving/ab/{SHA}/adapter_model.safetensors"
    )


@pytest.mark.parametrize("sha", ["AB" * 32, "ab" * 31, "zz" * 32, "../" + "a" * 61, ""])
def test_serving_key_refuses_what_is_no_sha256(sha: str) -> None:
    with pytest.raises(BadKey):
        serving_key(sha, "adapter_model.safetensors")


class TestSymlinksOnDisk:
    """The disk backend resolves every path: no symlink may lead out of (or around in) the root."""

    @pytest.fixture
    def outside(self, tmp_path: Path) -> Path:
        path = tmp_path / "outside"
        path.mkdir()
        (path / "secret").write_bytes(b"secret")
        return path

    def test_writing_through_a_linked_folder_is_refused(
        self, disk_storage: LocalDiskStorage, outside: Path
    ) -> None:
        (disk_storage.root / "quarantine").mkdir()
        os.symlink(outside, disk_storage.root / "quarantine" / "acme")

        with pytest.raises(BadKey):
            disk_storage.save_stream("quarantine/acme/new", io.BytesIO(b"x"), max_bytes=1)
        with pytest.raises(BadKey):
            disk_storage.save_stream("quarantine/acme/deeper/new", io.BytesIO(b"x"), max_bytes=1)
        with pytest.raises(BadKey):
            disk_storage.delete_prefix("quarantine/acme/")
        with pytest.raises(BadKey):
            disk_storage.list("quarantine/acme/")

        assert sorted(p.name for p in outside.iterdir()) == ["secret"]

    def test_reading_or_deleting_a_linked_file_is_refused(
        self, disk_storage: LocalDiskStorage, outside: Path
    ) -> None:
        (disk_storage.root / "quarantine" / "acme").mkdir(parents=True)
        os.symlink(outside / "secret", disk_storage.root / "quarantine" / "acme" / "secret")
        key = "quarantine/acme/secret"

        for operation in (
            lambda: disk_storage.open(key),
            lambda: disk_storage.size(key),
            lambda: disk_storage.exists(key),
            lambda: disk_storage.delete(key),
            lambda: disk_storage.copy(key, GOOD),
            lambda: disk_storage.save_stream(key, io.BytesIO(b"x"), max_bytes=1),
        ):
            with pytest.raises(BadKey):
                operation()

        assert (outside / "secret").read_bytes() == b"secret"
        assert disk_storage.list("quarantine/") == []

    def test_a_link_from_one_area_into_another_is_refused(
        self, disk_storage: LocalDiskStorage
    ) -> None:
        # Inside the root, but it would let a quarantine key write into the serving area.
        (disk_storage.root / "serving").mkdir()
        os.symlink(disk_storage.root / "serving", disk_storage.root / "quarantine")

        with pytest.raises(BadKey):
            disk_storage.save_stream(GOOD, io.BytesIO(b"{}"), max_bytes=2)

        assert list((disk_storage.root / "serving").iterdir()) == []

    def test_delete_prefix_removes_links_not_their_targets(
        self, disk_storage: LocalDiskStorage, outside: Path
    ) -> None:
        disk_storage.save_stream(GOOD, io.BytesIO(b"{}"), max_bytes=2)
        folder = disk_storage.root / "quarantine" / "acme" / "support"
        os.symlink(outside, folder / "linked-dir")
        os.symlink(outside / "secret", folder / "linked-file")

        disk_storage.delete_prefix("quarantine/acme/")

        assert not (disk_storage.root / "quarantine" / "acme").exists()
        assert (outside / "secret").read_bytes() == b"secret"

    def test_a_relative_root_is_refused(self) -> None:
        with pytest.raises(BadKey):
            LocalDiskStorage("relative/root")
