"""`python manage.py validate_adapter DIR (--base-model NAME | --base-model-dir MODEL_DIR)`.

Exit 0 when the adapter is valid, 1 when it is not, 2 on a usage error. The same checks as an
upload; --base-model-dir needs no database.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from adapters.validation import (
    BaseModelSpec,
    BaseModelSpecError,
    TrustedKey,
    ValidationReport,
    canonical_manifest,
    key_fingerprint,
    validate_adapter_dir,
)
from adapters.validation.signatures import SignatureFailure

# The largest --max-lora-rank vLLM accepts; used when neither --max-rank nor an engine says less.
VLLM_MAX_LORA_RANK = 512
_MAX_MODEL_CONFIG_BYTES = 1024 * 1024
_JSON_FIELDS = (
    "valid",
    "errors",
    "rank",
    "alpha",
    "target_modules",
    "size_bytes",
    "files",
    "manifest_sha256",
    "dtype",
    "base_model",
    "signer",
    "checks",
)


def _usage(message: str) -> CommandError:
    return CommandError(message, returncode=2)


class Command(BaseCommand):
    help = "Validate a LoRA adapter directory exactly as an upload is validated."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "dir", help="folder with adapter_config.json and adapter_model.safetensors"
        )
        base = parser.add_mutually_exclusive_group(required=True)
        base.add_argument("--base-model", metavar="NAME", help="a registered base model")
        base.add_argument(
            "--base-model-dir",
            metavar="MODEL_DIR",
            help="a model folder with config.json (no database)",
        )
        parser.add_argument(
            "--max-rank",
            type=int,
            help="largest r accepted (default: the largest max_lora_rank of the base model's "
            f"engines, else {VLLM_MAX_LORA_RANK})",
        )
        parser.add_argument("--json", action="store_true", help="print the report as JSON")
        parser.add_argument("--signature", metavar="FILE", help="a signature to verify")
        parser.add_argument(
            "--trusted-key",
            metavar="PEM",
            action="append",
            default=[],
            help="a public key (repeatable)",
        )
        parser.add_argument("--require-signature", action="store_true")
        parser.add_argument(
            "--manifest-out",
            metavar="FILE",
            help="write the canonical manifest bytes (what to sign)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        adapter_dir = Path(options["dir"])
        if not adapter_dir.is_dir():
            raise _usage(f"{adapter_dir} is not a directory.")
        if options["base_model_dir"]:
            spec = _spec_from_dir(Path(options["base_model_dir"]))
            max_rank = VLLM_MAX_LORA_RANK if options["max_rank"] is None else options["max_rank"]
        else:
            spec, engine_rank = _spec_from_db(options["base_model"])
            max_rank = options["max_rank"]
            if max_rank is None:
                max_rank = engine_rank or VLLM_MAX_LORA_RANK
        if max_rank < 1:
            raise _usage("--max-rank must be at least 1.")
        signature = _read_small(options["signature"], "signature") if options["signature"] else None
        keys = [_trusted_key(path) for path in options["trusted_key"]]
        try:
            report = validate_adapter_dir(
                adapter_dir,
                base_model=spec,
                max_rank=max_rank,
                signature=signature,
                trusted_keys=keys,
                require_signature=options["require_signature"],
            )
        except OSError as exc:  # the disk failed us; says nothing about the adapter
            raise _usage(f"Cannot read {adapter_dir}: {exc}") from None
        if options["manifest_out"] and report.manifest_sha256:
            Path(options["manifest_out"]).write_bytes(canonical_manifest(report.files))
        self.stdout.write(_render_json(report) if options["json"] else _render_text(report))
        if not report.valid:
            raise CommandError(f"{adapter_dir} is not a valid adapter.", returncode=1)


def _spec_from_dir(model_dir: Path) -> BaseModelSpec:
    config = _read_small(str(model_dir / "config.json"), "base model config.json")
    try:
        hf_config = json.loads(config)
    except ValueError as exc:
        raise _usage(f"{model_dir / 'config.json'} is not valid JSON ({exc}).") from None
    given = str(model_dir).rstrip("/") or "/"
    name = Path(given).name or given
    try:
        return BaseModelSpec.from_hf_config(
            hf_config, name, aliases=(given, str(model_dir.resolve()))
        )
    except BaseModelSpecError as exc:
        raise _usage(str(exc)) from None


def _spec_from_db(name: str) -> tuple[BaseModelSpec, int | None]:
    # Imported here: the validation package and its tests must not need Django models.
    from django.db.models import Max

    from adapters.models import BaseModel
    from adapters.services.registry import base_model_spec

    base = BaseModel.objects.filter(name=name).first()
    if base is None:
        known = ", ".join(BaseModel.objects.values_list("name", flat=True)[:20]) or "none"
        raise _usage(f"No base model named {name!r} (registered: {known}).")
    engine_rank = base.engines.aggregate(rank=Max("max_lora_rank"))["rank"]
    try:
        return base_model_spec(base), engine_rank
    except BaseModelSpecError as exc:
        raise _usage(f"Base model {name!r} is unusable: {exc}") from None


def _read_small(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_MODEL_CONFIG_BYTES + 1)
    except OSError as exc:
        raise _usage(f"Cannot read the {what} {path}: {os.strerror(exc.errno or 0)}.") from None
    if len(data) > _MAX_MODEL_CONFIG_BYTES:
        raise _usage(f"The {what} {path} is larger than {_MAX_MODEL_CONFIG_BYTES} bytes.")
    return data


def _trusted_key(path: str) -> TrustedKey:
    pem = _read_small(path, "public key")
    try:
        return TrustedKey(key_id=key_fingerprint(pem)[:16], public_key_pem=pem)
    except SignatureFailure as exc:
        raise _usage(f"{path}: {exc}") from None


def _render_json(report: ValidationReport) -> str:
    data = report.to_dict()
    return json.dumps({key: data[key] for key in _JSON_FIELDS}, indent=2)


def _render_text(report: ValidationReport) -> str:
    lines = [("VALID" if report.valid else "INVALID") + f" for base model {report.base_model}"]
    if report.rank is not None:
        lines.append(f"  rank {report.rank}, alpha {report.alpha}, modules {report.target_modules}")
    for digest in report.files:
        lines.append(f"  {digest.sha256}  {digest.name} ({digest.size} bytes)")
    if report.manifest_sha256:
        lines.append(f"  manifest sha256 {report.manifest_sha256}")
    if report.signer:
        lines.append(f"  signed ({report.signature_format}) by key {report.signer}")
    lines += [f"  {error.code}: {error.message}" for error in report.errors]
    return "\n".join(lines)
