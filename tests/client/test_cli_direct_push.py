"""`push` of a large model file: straight to object storage in presigned parts (the moto S3
server), completed by the portal, which checks the assembled file against the client's sha256."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from lora_portal_client import AdapterRef, Client, PortalError
from lora_portal_client.push import push as push_directory

from adapters.models import AdapterVersion, DirectUpload
from core.audit_models import AuditEvent
from tests.client.steps import push
from tests.factories import adapter_files

pytestmark = [pytest.mark.s3, pytest.mark.django_db(transaction=True)]
MiB = 1024 * 1024


@pytest.fixture
def direct_cli(cli, s3_portal):
    cli.url = s3_portal["url"]
    return cli


def large_adapter(tmp_path, size: int):
    """A real adapter's config with an 11 MiB model file: only the upload path reads it here."""
    directory = adapter_files(tmp_path / "big")
    (directory / "adapter_model.safetensors").write_bytes(random.Random(7).randbytes(size))
    return directory


def test_a_large_file_goes_in_parts_and_becomes_a_version(
    direct_cli, tmp_path, s3_server, s3_portal
):
    directory = large_adapter(tmp_path, 11 * MiB)
    done = push(
        direct_cli,
        directory,
        extra=("--direct-threshold-mib", "10", "--part-size-mib", "5", "--json"),
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["number"] == 1
    version = AdapterVersion.objects.get(adapter__name="support", number=1)
    model = next(f for f in version.manifest if f["name"] == "adapter_model.safetensors")
    data = (directory / "adapter_model.safetensors").read_bytes()
    assert model == {
        "name": "adapter_model.safetensors",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    started = AuditEvent.objects.get(action="upload.start").after or {}
    assert started["parts"] == 3 and started["part_size"] == 5 * MiB
    assert not DirectUpload.objects.exists()  # completed: the pending row is gone
    # No multipart upload left open in the store.
    assert not s3_server.admin.list_multipart_uploads(Bucket=s3_portal["bucket"]).get("Uploads")


def test_below_the_threshold_it_is_the_plain_upload(direct_cli, tmp_path):
    done = push(direct_cli, adapter_files(tmp_path / "small"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "acme/support@1"
    assert not DirectUpload.objects.exists()


def test_a_refused_push_leaves_nothing_pending(direct_cli, tmp_path, s3_server, s3_portal):
    # A maintainer may not push to globex: refused before anything is stored.
    directory = large_adapter(tmp_path, 6 * MiB)
    done = push(
        direct_cli, directory, adapter="globex/legal", extra=("--direct-threshold-mib", "1")
    )
    assert done.returncode == 2 and "tenant.not_found (HTTP 404)" in done.stderr
    assert not DirectUpload.objects.exists()
    assert not s3_server.admin.list_multipart_uploads(Bucket=s3_portal["bucket"]).get("Uploads")


class PartFailsAfterFirst(Client):
    """Test double for a network that drops mid-upload: the second part's PUT fails."""

    def put_part(self, url, chunks, size):
        self.sent = getattr(self, "sent", 0) + 1
        if self.sent == 2:
            raise PortalError("upload.storage_unreachable", "connection reset (test double)")
        return super().put_part(url, chunks, size)


def test_a_part_that_fails_aborts_the_upload(direct_cli, tmp_path, s3_server, s3_portal):
    directory = large_adapter(tmp_path, 11 * MiB)
    # Parts go to object storage through a client of their own: never with the portal's token.
    with Client(s3_portal["url"], direct_cli.tokens["bob"]) as plain:
        assert "authorization" not in plain._storage.headers
    with (
        PartFailsAfterFirst(s3_portal["url"], direct_cli.tokens["bob"]) as client,
        pytest.raises(PortalError, match="test double"),
    ):
        push_directory(
            client,
            AdapterRef("acme", "support"),
            directory,
            direct_threshold=MiB,
            part_size=5 * MiB,
        )
    assert AuditEvent.objects.filter(action="upload.start").count() == 1
    assert (AuditEvent.objects.get(action="upload.discard").after or {})["reason"] == "aborted"
    assert not DirectUpload.objects.exists() and not AdapterVersion.objects.exists()
    assert not s3_server.admin.list_multipart_uploads(Bucket=s3_portal["bucket"]).get("Uploads")
