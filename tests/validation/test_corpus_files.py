"""Wrong files: pickles under any name, extra or missing files, links, specials, oversized."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest

from adapters.validation import validate_adapter
from tests.validation.builders import (
    CONFIG,
    SPEC,
    WEIGHTS,
    Case,
    ValidationLimits,
    run_case,
)

PICKLE_P2 = pickle.dumps({"weight": [1.0, 2.0]}, protocol=2)
PICKLE_P4 = pickle.dumps({"weight": [1.0, 2.0]}, protocol=4)
PICKLE_P5 = pickle.dumps({"weight": [1.0, 2.0]}, protocol=5)


def _torch_zip() -> bytes:
    """The layout torch.save writes: a zip archive with archive/data.pkl inside."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("archive/data.pkl", PICKLE_P2)
        archive.writestr("archive/version", "3\n")
    return buffer.getvalue()


def _put(name: str, data: bytes):
    def build(adapter: Path) -> None:
        (adapter / name).write_bytes(data)

    return build


def _remove(name: str):
    return lambda adapter: (adapter / name).unlink()


def _symlink_weights(adapter: Path) -> None:
    real = adapter.parent / "elsewhere.safetensors"
    (adapter / WEIGHTS).rename(real)
    (adapter / WEIGHTS).symlink_to(real)


def _symlink_extra(adapter: Path) -> None:
    (adapter / "passwd").symlink_to("/etc/passwd")


def _dangling_symlink_config(adapter: Path) -> None:
    (adapter / CONFIG).unlink()
    (adapter / CONFIG).symlink_to(adapter / "nowhere.json")


def _subdir(adapter: Path) -> None:
    (adapter / "checkpoint-100").mkdir()


def _weights_is_a_dir(adapter: Path) -> None:
    (adapter / WEIGHTS).unlink()
    (adapter / WEIGHTS).mkdir()


def _fifo(adapter: Path) -> None:
    os.mkfifo(adapter / "pipe")


def _limits(**kwargs):
    return lambda adapter: {"limits": ValidationLimits(**kwargs)}


def _grow_weights(adapter: Path) -> dict:
    with open(adapter / WEIGHTS, "ab") as handle:
        handle.write(b"\0" * 100_000)
    return {"limits": ValidationLimits(max_weights_bytes=40_000)}


CASES = [
    Case("adapter_model.bin beside", _put("adapter_model.bin", PICKLE_P2), "file.pickle_refused"),
    Case("empty .pt", _put("weights.pt", b""), "file.pickle_refused"),
    Case(".pth", _put("model.pth", b"not even a pickle"), "file.pickle_refused"),
    Case(".pkl upper case", _put("STATE.PKL", PICKLE_P4), "file.pickle_refused"),
    Case("pickle p2 as the weights", _put(WEIGHTS, PICKLE_P2), "file.pickle_refused"),
    Case("pickle p4 as the weights", _put(WEIGHTS, PICKLE_P4), "file.pickle_refused"),
    Case("torch zip as the weights", _put(WEIGHTS, _torch_zip()), "file.pickle_refused"),
    Case("pickle p5 as the config", _put(CONFIG, PICKLE_P5), "file.pickle_refused"),
    Case("pickle under a harmless name", _put("notes.txt", PICKLE_P4), "file.pickle_refused"),
    Case("torch zip under a harmless name", _put("data", _torch_zip()), "file.pickle_refused"),
    Case("README beside", _put("README.md", b"# my adapter\n"), "file.unexpected"),
    Case("hidden file beside", _put(".DS_Store", b"\0\0\0\1Bud1"), "file.unexpected"),
    Case("tokenizer beside", _put("tokenizer.json", b"{}"), "file.unexpected"),
    Case("config missing", _remove(CONFIG), "file.missing"),
    Case("weights missing", _remove(WEIGHTS), "file.missing"),
    Case("weights are a symlink", _symlink_weights, "file.symlink_refused"),
    Case("symlink to /etc/passwd", _symlink_extra, "file.symlink_refused"),
    Case("dangling symlink config", _dangling_symlink_config, "file.symlink_refused"),
    Case("sub-folder", _subdir, "file.not_regular"),
    Case("weights are a folder", _weights_is_a_dir, "file.not_regular"),
    Case("named pipe", _fifo, "file.not_regular"),
    Case("config over its cap", _limits(max_config_bytes=100), "file.too_large"),
    Case("header declares more than the cap", _limits(max_weights_bytes=10_000), "file.too_large"),
    Case("stream longer than the cap", _grow_weights, "file.too_large"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_wrong_files_are_rejected_with_their_code(case: Case, tmp_path: Path) -> None:
    report = run_case(case, tmp_path)
    assert not report.valid
    assert case.code in report.error_codes, report.error_codes


@pytest.mark.parametrize(
    "name", ["../adapter_config.json", "sub/adapter_model.safetensors", "", "..", "a\\b", "x\x00y"]
)
def test_stream_names_that_are_paths_are_refused(name: str) -> None:
    report = validate_adapter({name: io.BytesIO(b"{}")}, base_model=SPEC, max_rank=64)
    assert "file.name_invalid" in report.error_codes
    assert report.error_codes.count("file.missing") == 2


def test_a_pickle_weights_file_is_not_parsed_further(tmp_path: Path) -> None:
    report = run_case(Case("p4", _put(WEIGHTS, PICKLE_P4), "file.pickle_refused"), tmp_path)
    outcomes = {c.name: c.outcome for c in report.checks}
    assert outcomes["files.weights_not_pickle"] == "failed"
    assert outcomes["safetensors.header"] == "skipped"
    assert outcomes["tensors.finite"] == "skipped"


def test_a_folder_of_many_files_is_refused_with_a_bounded_report(tmp_path: Path) -> None:
    import resource

    from tests.validation.builders import good_adapter, validate

    adapter = good_adapter(tmp_path / "adapter")
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    count = min(soft + 100, 2000)  # more than can be open at once, where the limit allows
    for i in range(count):
        (adapter / f"shard-{i:05d}.txt").write_bytes(b"x")
    report = validate(adapter, limits=ValidationLimits(max_errors=50))
    assert not report.valid
    assert len(report.errors) == 50 and report.errors_truncated
    assert set(report.error_codes) == {"file.unexpected"}
