"""Validate an adapter from open streams (uploads, object storage) or from a directory.

Each file is read once, in order: the config whole (it is small), the weights as an 8-byte
prefix, the header, then the data section in fixed-size chunks that are hashed and scanned for
NaN/Inf in the same pass. Nothing is ever trusted from the input: names, sizes, offsets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import BinaryIO

from adapters.validation.base_model import BaseModelSpec
from adapters.validation.codes import Issue, issue
from adapters.validation.files import (
    CONFIG_NAME,
    REQUIRED_FILES,
    WEIGHTS_NAME,
    extra_file_issue,
    open_adapter_dir,
    pickle_reason,
)
from adapters.validation.peft_config import LoraConfig, check_config, parse_config
from adapters.validation.report import FileDigest, Recorder, ValidationReport, manifest_sha256
from adapters.validation.scan import FileTooLarge, HashingReader
from adapters.validation.signatures import (
    SignatureFailure,
    SignatureResult,
    TrustedKey,
    verify_signature,
)
from adapters.validation.tensors import TensorSummary
from adapters.validation.weights import ValidationLimits, scan_weights

DEFAULT_LIMITS = ValidationLimits()


def validate_adapter(
    files: Mapping[str, BinaryIO],
    *,
    base_model: BaseModelSpec,
    max_rank: int,
    signature: bytes | None = None,
    trusted_keys: Sequence[TrustedKey] = (),
    require_signature: bool = False,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> ValidationReport:
    """Validate the adapter whose files are `files` ({file name: readable binary stream}).

    Streams are read from their current position to their end and left open; an exception a
    stream raises propagates (a storage failure is not a verdict on the adapter). `max_rank` is
    the largest r accepted: the max_lora_rank of the engines meant to serve it. A signature is
    verified whenever one is given; `require_signature` also refuses an unsigned adapter.
    """
    return _validate(
        files, [], base_model, max_rank, signature, trusted_keys, require_signature, limits
    )


def validate_adapter_dir(
    path: str | os.PathLike[str],
    *,
    base_model: BaseModelSpec,
    max_rank: int,
    signature: bytes | None = None,
    trusted_keys: Sequence[TrustedKey] = (),
    require_signature: bool = False,
    limits: ValidationLimits = DEFAULT_LIMITS,
) -> ValidationReport:
    """Validate the adapter in directory `path` (links, folders and devices are refused)."""
    with open_adapter_dir(path) as (streams, problems):
        return _validate(
            streams,
            problems,
            base_model,
            max_rank,
            signature,
            trusted_keys,
            require_signature,
            limits,
        )


def _validate(
    files: Mapping[str, BinaryIO],
    file_problems: list[Issue],
    spec: BaseModelSpec,
    max_rank: int,
    signature: bytes | None,
    trusted_keys: Sequence[TrustedKey],
    require_signature: bool,
    limits: ValidationLimits,
) -> ValidationReport:
    if max_rank < 1:
        raise ValueError("max_rank must be >= 1")
    recorder = Recorder(limits.max_errors)
    _check_file_set(files, file_problems, recorder)
    digests: list[FileDigest] = []
    buffer = memoryview(bytearray(limits.chunk_size))

    config: LoraConfig | None = None
    config_stream = files.get(CONFIG_NAME)
    if config_stream is None:
        recorder.skip("config.parse")
    else:
        raw, digest = _read_config(config_stream, limits, recorder)
        if digest:
            digests.append(digest)
        parsed = parse_config(raw, recorder) if raw is not None else None
        if parsed is not None:
            config = check_config(parsed, spec=spec, max_rank=max_rank, recorder=recorder)

    summary = TensorSummary(dtype=None, modules=())
    weights = files.get(WEIGHTS_NAME)
    if weights is None:
        recorder.skip("safetensors.header")
    else:
        digest, summary = scan_weights(
            weights, spec=spec, config=config, limits=limits, buffer=buffer, recorder=recorder
        )
        if digest:
            digests.append(digest)

    complete = len(digests) == len(REQUIRED_FILES)
    signer = _check_signature(
        signature, digests if complete else None, trusted_keys, require_signature, recorder
    )
    return ValidationReport(
        valid=not recorder.failed,
        errors=recorder.errors,
        checks=recorder.checks,
        base_model=spec.name,
        # A rank above max_rank is named in its error; the field holds only ranks the engines
        # take, so whatever r says, what reaches the rank column fits it.
        rank=config.rank if config and config.rank and config.rank <= max_rank else None,
        alpha=config.alpha if config else None,
        use_rslora=config.use_rslora if config else False,
        target_modules=list(config.target_modules or ()) if config else [],
        dtype=summary.dtype,
        size_bytes=sum(d.size for d in digests),
        files=sorted(digests, key=lambda d: d.name),
        manifest_sha256=manifest_sha256(digests) if complete else None,
        signature_format=signer.format if signer else None,
        signer=signer.key_id if signer else None,
        config=config.raw if config else None,
        errors_truncated=recorder.truncated,
    )


def _check_file_set(
    files: Mapping[str, BinaryIO], problems: list[Issue], recorder: Recorder
) -> None:
    found = [
        *problems,
        *(extra_file_issue(name, s) for name, s in files.items() if name not in REQUIRED_FILES),
        *(issue("file.missing", name=n) for n in REQUIRED_FILES if n not in files),
    ]
    recorder.record("files.set", found)


def _read_config(
    stream: BinaryIO, limits: ValidationLimits, recorder: Recorder
) -> tuple[bytes | None, FileDigest | None]:
    reader = HashingReader(stream, limit=limits.max_config_bytes)
    try:
        raw = reader.read(limits.max_config_bytes + 1)
    except FileTooLarge:
        recorder.record(
            "files.config_size",
            [issue("file.too_large", name=CONFIG_NAME, limit=limits.max_config_bytes, detail="")],
        )
        return None, None
    recorder.record("files.config_size", [])
    digest = FileDigest(CONFIG_NAME, reader.size, reader.hasher.hexdigest())
    reason = pickle_reason(raw[:16])
    if not recorder.record(
        "files.config_not_pickle",
        [issue("file.pickle_refused", name=CONFIG_NAME, reason=reason)] if reason else [],
    ):
        return None, digest
    return raw, digest


def _check_signature(
    signature: bytes | None,
    digests: list[FileDigest] | None,
    trusted_keys: Sequence[TrustedKey],
    require_signature: bool,
    recorder: Recorder,
) -> SignatureResult | None:
    if not signature:
        if require_signature:
            recorder.record("signature.verify", [issue("signature.missing")])
        else:
            recorder.skip("signature.verify")
        return None
    if digests is None:
        recorder.skip("signature.verify")  # no manifest to verify against; already rejected
        return None
    try:
        result = verify_signature(signature, digests, trusted_keys)
    except SignatureFailure as failure:
        recorder.record("signature.verify", [failure.issue])
        return None
    recorder.record("signature.verify", [])
    return result
