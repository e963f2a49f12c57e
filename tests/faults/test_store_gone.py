"""The object store gone: during an upload (the API) and during staging onto a node (the worker).

The store is a moto S3 server of this test's own (tests/fixtures/s3.py starts the session's; this
one is killed). A caller gets a clear error with a code; nothing half-made is left (no version
row, no quarantine object, no half-staged directory on the node); when the store is back, staging
the same version again succeeds with a verified copy. moto keeps objects in memory, so when it
is started again the test puts back the serving objects a real store would still hold.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.models import AdapterVersion
from core.errors import ApplicationError
from tests.factories import adapter_files
from tests.faults.harness import Answer, CallerLog, chain_verifies, ledger
from tests.faults.record import FaultRecord, Stopwatch
from tests.fixtures.s3 import _free_port, _wait_until_serving
from tests.workers.fleet import servable_version
from workers.models import Engine
from workers.node_copies import stage_version_files

pytestmark = pytest.mark.django_db(transaction=True)
BUCKET = "faults-store"


class OwnMoto:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        log = self.folder / "moto.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        _wait_until_serving(self.proc, self.url, log)

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def store(settings, tmp_path):
    moto = OwnMoto(tmp_path / "moto")
    moto.start()
    settings.ADAPTER_STORAGE_BACKEND = "s3"
    settings.S3_BUCKET = BUCKET
    settings.S3_ENDPOINT_URL = moto.url
    settings.S3_ACCESS_KEY_ID = settings.S3_SECRET_ACCESS_KEY = "testing"
    _bucket(moto)
    yield moto
    moto.kill()


def _bucket(moto: OwnMoto) -> None:
    import boto3

    boto3.client(
        "s3",
        endpoint_url=moto.url,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ).create_bucket(Bucket=BUCKET)


def test_staging_with_the_store_gone_fails_clearly_and_leaves_nothing(world, store, tmp_path):
    from adapters.storage import get_storage

    version = servable_version(world.support, tmp_path, seed=41)
    node = Engine.objects.create(
        name="node-s3",
        base_model=world.base,
        url="http://127.0.0.1:9",
        served_model_name="tiny",
        adapter_root=str(tmp_path / "node"),
        state="up",
    )
    store.kill()
    watch = Stopwatch()
    with pytest.raises(ApplicationError) as refused:
        stage_version_files(node, version, None, reason="t", retry=True)
    refused_after = watch.elapsed()
    root = Path(node.adapter_root)
    leftovers = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
    assert leftovers == [], leftovers
    assert refused.value.code.startswith("storage."), refused.value.code
    store.start()
    _bucket(store)
    storage = get_storage()
    src = tmp_path / "src-support-41"
    for entry in version.manifest:
        data = (src / entry["name"]).read_bytes()
        storage.save_stream(
            version.serving_keys[entry["name"]], io.BytesIO(data), max_bytes=len(data) + 1
        )
    back = Stopwatch()
    staged = stage_version_files(node, version, None, reason="t", retry=True)
    heal_s = back.elapsed()
    assert sorted(p.name for p in staged.path.iterdir()) == sorted(
        e["name"] for e in version.manifest
    )
    FaultRecord(
        fault="store-gone-staging",
        title="Object store (S3) gone while a worker stages a version onto its node",
        part="storage",
        caller_saw=f"the stage task fails with `{refused.value.code}` after {refused_after:.1f} s "
        "(the client's retries); the converge pass retries it next period",
        heal_s=heal_s,
        lost="nothing: no half-staged file on the node (downloads go to .incoming and are "
        "removed); a verified copy once the store is back",
        test="tests/faults/test_store_gone.py::"
        "test_staging_with_the_store_gone_fails_clearly_and_leaves_nothing",
    ).write()


def test_an_upload_with_the_store_gone_is_refused_whole(world, store, tmp_path):
    client = world.client("bob")  # its sign-in is audited: before the ledger is read
    before = ledger()
    store.kill()
    files = adapter_files(tmp_path / "up")
    caller = CallerLog()
    watch = Stopwatch()
    with (
        (files / "adapter_config.json").open("rb") as config,
        (files / "adapter_model.safetensors").open("rb") as model,
    ):
        response = client.post(
            "/api/v1/tenants/acme/adapters/support/versions/",
            {"adapter_config": config, "adapter_model": model},
            format="multipart",
        )
    seconds = watch.elapsed()
    body = response.json()
    code = body.get("error", {}).get("code", "<not json>")
    caller.answers.append(Answer(response.status_code, code, seconds))
    assert response.status_code == 503 and code == "upload.storage_failed", body
    assert ledger() == before
    assert not AdapterVersion.objects.filter(adapter=world.support).exists()
    store.start()  # verification reads the chain's checkpoints from the store
    _bucket(store)
    assert chain_verifies()
    FaultRecord(
        fault="store-gone-upload",
        title="Object store (S3) gone during an upload (API, multipart)",
        part="storage",
        caller_saw=f"{caller.summary()}",
        heal_s=None,
        lost="nothing: no version row, no audit event, nothing stored",
        test="tests/faults/test_store_gone.py::test_an_upload_with_the_store_gone_is_refused_whole",
    ).write()
