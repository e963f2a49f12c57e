"""Adapter validation: files, safetensors header, PEFT config, tensors, values, hashes, signatures.

No Django here: the upload path, the Celery task and the CLI all call these functions.

    report = validate_adapter(
        {"adapter_config.json": config_stream, "adapter_model.safetensors": weights_stream},
        base_model=BaseModelSpec.from_hf_config(hf_config, "qwen3-32b"),
        max_rank=64,
        signature=signature_bytes_or_None,
        trusted_keys=[TrustedKey(key_id, pem_bytes), ...],
        require_signature=tenant_requires_signatures,
    )
    report.valid, report.errors, report.to_dict()
"""

from adapters.validation.base_model import (
    SUPPORTED_ARCHITECTURES,
    BaseModelSpec,
    BaseModelSpecError,
)
from adapters.validation.codes import CODES, Issue
from adapters.validation.files import CONFIG_NAME, REQUIRED_FILES, WEIGHTS_NAME
from adapters.validation.report import (
    CheckResult,
    FileDigest,
    ValidationReport,
    canonical_manifest,
    manifest_sha256,
)
from adapters.validation.signatures import (
    SignatureFailure,
    TrustedKey,
    key_fingerprint,
    load_public_key,
)
from adapters.validation.validator import (
    DEFAULT_LIMITS,
    validate_adapter,
    validate_adapter_dir,
)
from adapters.validation.weights import ValidationLimits

__all__ = [
    "CODES",
    "CONFIG_NAME",
    "DEFAULT_LIMITS",
    "REQUIRED_FILES",
    "SUPPORTED_ARCHITECTURES",
    "WEIGHTS_NAME",
    "BaseModelSpec",
    "BaseModelSpecError",
    "CheckResult",
    "FileDigest",
    "Issue",
    "SignatureFailure",
    "TrustedKey",
    "ValidationLimits",
    "ValidationReport",
    "canonical_manifest",
    "key_fingerprint",
    "load_public_key",
    "manifest_sha256",
    "validate_adapter",
    "validate_adapter_dir",
]
