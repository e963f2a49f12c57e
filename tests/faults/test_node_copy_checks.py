"""Each layer that verifies a node's copy of a version refuses a tampered one on its own.

The worker's check (workers.staging.verify_node_copy) is tested here with no engine behind it, so
that removing its sha256 comparison fails this test even though the plugin would still refuse the
load. The plugin's own check is tested in tests/engine/test_plugin_load.py
(`files.sha256_mismatch` from the engine, with the worker's check out of the way).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.audit_models import AuditEvent
from tests.faults.record import FaultRecord
from tests.workers.fleet import servable_version
from workers.models import AlarmKind, Engine, EngineAlarm, FleetAction
from workers.node_copies import stage_version_files
from workers.staging import NodeCopyInvalid, verify_node_copy

pytestmark = pytest.mark.django_db


@pytest.fixture
def node(world, tmp_path) -> Engine:
    return Engine.objects.create(
        name="node-a",
        base_model=world.base,
        url="http://127.0.0.1:9",
        served_model_name="tiny",
        adapter_root=str(tmp_path / "node-a"),
        state="up",
    )


def _tamper(copy: Path) -> bytes:
    """Flip one byte of the weights, keeping the size: only a hash tells."""
    model = copy / "adapter_model.safetensors"
    data = bytearray(model.read_bytes())
    data[-10] ^= 0xFF
    model.write_bytes(bytes(data))
    return bytes(data)


def test_the_workers_check_refuses_a_same_size_tampered_copy_by_itself(world, node, tmp_path):
    version = servable_version(world.support, tmp_path, seed=31)
    first = stage_version_files(node, version, None, reason="t", retry=False)
    good = (first.path / "adapter_model.safetensors").read_bytes()
    _tamper(first.path)

    with pytest.raises(NodeCopyInvalid) as refused:
        verify_node_copy(first.path, version.manifest)
    assert refused.value.code == "files.sha256_mismatch"

    # Staging again quarantines the bad copy (never deleted, never loaded) and brings a fresh one.
    audit_before = AuditEvent.objects.count()
    again = stage_version_files(node, version, None, reason="t", retry=True)
    assert (again.path / "adapter_model.safetensors").read_bytes() == good
    quarantined = list((Path(node.adapter_root) / ".quarantine").iterdir())
    assert len(quarantined) == 1
    assert (
        FleetAction.objects.filter(kind="quarantine", served_name=version.served_name).count() == 1
    )
    alarm = EngineAlarm.objects.get(engine=node, kind=AlarmKind.QUARANTINE)
    assert "files.sha256_mismatch" in alarm.message
    # The alarm is audited once; nothing else is written twice on the way.
    new_events = AuditEvent.objects.order_by("pk")[audit_before:]
    assert [e.action for e in new_events] == ["engine.alarm.raise"]
    FaultRecord(
        fault="node-copy-tampered",
        title="A node's staged copy altered on disk (same size, one byte)",
        part="workers",
        caller_saw=(
            "no request reaches it: the worker's own sha256 check refuses it "
            f"({refused.value.code}), quarantines it and raises a {AlarmKind.QUARANTINE} alarm"
        ),
        heal_s=None,
        lost="nothing: a fresh copy from the store, byte-identical to the original; "
        "1 quarantine action, 1 alarm",
        test="tests/faults/test_node_copy_checks.py::"
        "test_the_workers_check_refuses_a_same_size_tampered_copy_by_itself",
    ).write()
