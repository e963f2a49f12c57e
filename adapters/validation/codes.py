"""Every validation error code, with the message template a person can act on.

Codes are stable API: reports stored in the database, the REST API and the CLI's `--json` carry
them, so a code is never renamed or reused; add a new one instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_AN_ADAPTER = "An adapter is exactly adapter_config.json and adapter_model.safetensors"
_SAFETENSORS_FIX = "re-save the weights with safetensors' save_file or PEFT's save_pretrained"

CODES: dict[str, str] = {
    # files
    "file.missing": "Required file {name} is missing. " + _AN_ADAPTER + ".",
    "file.unexpected": "Unexpected file {name}. " + _AN_ADAPTER + "; remove everything else.",
    "file.name_invalid": "File name {name} is not allowed: use the bare names adapter_config.json "
    "and adapter_model.safetensors, without folders.",
    "file.pickle_refused": "{name} is a pickle-based file ({reason}). Pickle runs code when it is "
    "loaded and is never accepted; save the weights as adapter_model.safetensors "
    "(save_pretrained(..., safe_serialization=True)).",
    "file.symlink_refused": "{name} is a symbolic link; upload the file itself.",
    "file.not_regular": "{name} is not a regular file (a folder, device or pipe); upload a file.",
    "file.too_large": "{name} is larger than the limit of {limit} bytes{detail}.",
    "file.unreadable": "{name} could not be read ({reason}); upload it again.",
    # adapter_config.json
    "config.not_utf8": "adapter_config.json is not UTF-8 text ({reason}); save it as UTF-8 JSON.",
    "config.invalid_json": "adapter_config.json is not valid JSON ({reason}).",
    "config.duplicate_key": "adapter_config.json has the key {key} more than once; keep one.",
    "config.nan_literal": "adapter_config.json contains {literal}, which is not JSON; "
    "use a finite number.",
    "config.not_object": "adapter_config.json must be a JSON object, got {kind}.",
    "config.field_missing": "adapter_config.json lacks the required field {field}.",
    "config.field_type": "In adapter_config.json, {field} must be {expected}; got {value}.",
    "config.peft_type_not_lora": "peft_type is {value}; only LORA adapters can be served.",
    "config.rank_invalid": "r must be a positive integer; got {value}.",
    "config.rank_too_high": "r is {rank}, above the engines' max_lora_rank of {max_rank}; "
    "retrain with r <= {max_rank}.",
    "config.alpha_invalid": "lora_alpha must be a finite number above 0; got {value}.",
    "config.bias_not_supported": 'bias is {value}; vLLM serves only bias "none". '
    'Retrain with bias="none".',
    "config.dora_not_supported": "use_dora is true; vLLM does not serve DoRA adapters. "
    "Retrain without DoRA.",
    "config.modules_to_save_not_supported": "modules_to_save lists {value}; fully trained "
    "modules cannot be served beside a shared base model. Retrain without modules_to_save.",
    "config.rank_pattern_not_supported": "{field} is set ({value}); the portal accepts one rank "
    "and one alpha per adapter. Retrain or re-save without per-module ranks.",
    "config.feature_not_supported": "{field} is {value}; vLLM does not implement this PEFT "
    "feature, so the served adapter would differ from the trained one.",
    "config.target_modules_invalid": "target_modules must be a non-empty list of module names "
    '(got {value}); regular expressions and "all-linear" are not accepted.',
    "config.target_module_unknown": "target module {module} is not a LoRA-targetable module of "
    "base model {base_model} (known: {known}).",
    "config.base_model_mismatch": "base_model_name_or_path is {value}, but the adapter is for "
    "base model {base_model}; set it to one of {accepted}.",
    # adapter_model.safetensors: the header and the layout of the data
    "safetensors.too_short": "adapter_model.safetensors has {size} bytes, fewer than the 8-byte "
    "header length; " + _SAFETENSORS_FIX + ".",
    "safetensors.header_too_large": "The safetensors header declares {length} bytes, above the "
    "limit of {limit}; " + _SAFETENSORS_FIX + ".",
    "safetensors.header_truncated": "The file ends inside the safetensors header (declared "
    "{length} bytes, only {available} present); upload the complete file.",
    "safetensors.header_not_utf8": "The safetensors header is not UTF-8 ({reason}); "
    + _SAFETENSORS_FIX
    + ".",
    "safetensors.header_invalid_json": "The safetensors header is not valid JSON ({reason}); "
    + _SAFETENSORS_FIX
    + ".",
    "safetensors.header_not_object": "The safetensors header must be a JSON object, got {kind}.",
    "safetensors.header_duplicate_key": "The safetensors header has the key {key} more than once.",
    "safetensors.header_nan_literal": "The safetensors header contains {literal}, "
    "which is not JSON.",
    "safetensors.metadata_invalid": "__metadata__ must map strings to strings ({reason}).",
    "safetensors.tensor_entry_invalid": "Tensor {name}: {reason}; each entry must be "
    '{{"dtype", "shape", "data_offsets"}}.',
    "safetensors.unknown_dtype": "Tensor {name} has dtype {dtype}, which the portal does not know.",
    "safetensors.shape_invalid": "Tensor {name} has shape {shape}; a shape is a list of "
    "non-negative integers.",
    "safetensors.size_overflow": "Tensor {name} with shape {shape} is too large to address.",
    "safetensors.offsets_invalid": "Tensor {name} has data_offsets {offsets}; they must be "
    "[begin, end] with 0 <= begin <= end.",
    "safetensors.offsets_size_mismatch": "Tensor {name} occupies {actual} bytes but its dtype "
    "and shape need {expected}.",
    "safetensors.offsets_not_contiguous": "The data section has a gap before tensor {name} "
    "(expected offset {expected}, found {found}); " + _SAFETENSORS_FIX + ".",
    "safetensors.offsets_overlap": "Tensors {name} and {other} overlap in the data section.",
    "safetensors.offsets_out_of_bounds": "The file ends at data offset {available} but the header "
    "declares data up to {declared}; upload the complete file.",
    "safetensors.trailing_bytes": "The file has {extra} bytes after the last tensor; "
    + _SAFETENSORS_FIX
    + ".",
    "safetensors.library_rejected": "The safetensors library refuses this file ({reason}).",
    "safetensors.library_mismatch": "The safetensors library reads this header differently "
    "({reason}); " + _SAFETENSORS_FIX + ".",
    # tensors against the base model and the config
    "tensors.none": "adapter_model.safetensors holds no tensors.",
    "tensors.name_invalid": "Tensor {name} is not a LoRA weight; names must look like "
    "base_model.model.model.layers.N.<module>.lora_A.weight (or lora_B).",
    "tensors.layer_out_of_range": "Tensor {name} names layer {layer}, but base model "
    "{base_model} has layers 0..{last}.",
    "tensors.module_unknown": "Tensor {name} targets {module}, which is not a LoRA-targetable "
    "module of base model {base_model} (known: {known}).",
    "tensors.module_not_targeted": "Tensor {name} is for module {module}, which is not in "
    "target_modules {targets}.",
    "tensors.target_module_missing": "target_modules lists {module} but the file has no "
    "tensors for it.",
    "tensors.pair_incomplete": "{name} has no matching {missing}; every LoRA A needs its B.",
    "tensors.not_2d": "Tensor {name} has shape {shape}; LoRA matrices are 2-D.",
    "tensors.dtype_not_float": "Tensor {name} has dtype {dtype}; LoRA weights must be "
    "F16, BF16, F32 or F64.",
    "tensors.shape_mismatch": "Tensor {name} has shape {shape}; base model {base_model} "
    "needs {expected}.",
    "tensors.rank_mismatch": "Tensor {name} has rank {found}, but adapter_config.json "
    "says r={rank}.",
    "tensors.nonfinite": "Tensor {name} contains NaN or infinite values.",
    # signatures
    "signature.missing": "This tenant requires signed adapters and none was uploaded; sign the "
    "files (model-signing with an EC key, or a detached signature over the manifest).",
    "signature.no_trusted_keys": "A signature is required or given, but the tenant has no "
    "registered public keys; register the signer's public key first.",
    "signature.malformed": "The signature could not be read ({reason}).",
    "signature.unsupported_format": "The signature's format is not supported ({reason}).",
    "signature.unknown_key": "The signature was made with a key that is not registered for "
    "this tenant (key hint {hint}).",
    "signature.invalid": "The signature does not verify ({reason}).",
    "signature.manifest_mismatch": "The signature is valid but covers different files: {reason}. "
    "The files were changed after signing, or the wrong files were signed.",
    "signature.key_invalid": "The public key cannot be used ({reason}); register a PEM "
    "ECDSA P-256/P-384 or Ed25519 public key.",
    # base model description (a usage problem, not an adapter problem)
    "base_model.unsupported_architecture": "Base model architecture {architecture} is not "
    "supported (supported: {supported}).",
    "base_model.config_invalid": "The base model's config.json is unusable ({reason}).",
}


@dataclass(frozen=True)
class Issue:
    """One failure: a stable code and a message made from its template."""

    code: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


class _Params(dict[str, str]):
    def __missing__(self, key: str) -> str:  # a template never crashes on a missing parameter
        return "?"


def clip(value: Any, limit: int = 120) -> str:
    """A printable, bounded rendering of a value taken from untrusted input."""
    text = value if isinstance(value, str) else repr(value)
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def as_json(value: Any) -> str:
    """A config value as the person wrote it in JSON ("4" and 4 differ), bounded."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return clip(text)


def issue(code: str, **params: Any) -> Issue:
    """Build an Issue; unknown codes are a programming error and raise KeyError."""
    template = CODES[code]
    rendered = _Params({k: clip(v) for k, v in params.items()})
    return Issue(code=code, message=template.format_map(rendered))
