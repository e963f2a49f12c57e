"""Cross-check of our header reading with the `safetensors` library, without the tensor data.

The library only opens paths, so the header is written to a sparse temporary file of the full
declared size: the data section is a hole, costing neither memory nor disk, and the library's
own rules (offsets, coverage, dtypes) run on exactly the header bytes that were uploaded.
"""

from __future__ import annotations

import os
import tempfile

from safetensors import safe_open

from adapters.validation.codes import Issue, clip, issue
from adapters.validation.safetensors_header import SafetensorsHeader


def crosscheck_header(
    prefix_and_header: bytes, header: SafetensorsHeader, *, scratch_dir: str | None = None
) -> list[Issue]:
    """`prefix_and_header` is the file's first 8 + N bytes, already accepted by our reader."""
    with tempfile.TemporaryDirectory(prefix="lp-st-", dir=scratch_dir) as tmp:
        path = os.path.join(tmp, "header.safetensors")
        with open(path, "wb") as sparse:
            sparse.write(prefix_and_header)
            sparse.truncate(header.file_size)
        try:
            with safe_open(path, framework="numpy") as handle:
                seen = {
                    name: (
                        handle.get_slice(name).get_dtype(),
                        tuple(handle.get_slice(name).get_shape()),
                    )
                    for name in handle.keys()  # noqa: SIM118 (not a dict)
                }
                order = list(handle.offset_keys())
                metadata = handle.metadata() or {}
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:  # noqa: BLE001 - a Rust panic is a BaseException; any refusal counts
            return [issue("safetensors.library_rejected", reason=clip(str(exc), 200))]
    ours = {t.name: (t.dtype, t.shape) for t in header.tensors}
    if seen != ours:
        differing = sorted(set(seen.items()) ^ set(ours.items()))[:3]
        return [issue("safetensors.library_mismatch", reason=f"tensors differ: {differing}")]
    sized = {t.name for t in header.tensors if t.end > t.begin}  # empty ones have no fixed place
    if [n for n in order if n in sized] != [t.name for t in header.tensors if t.name in sized]:
        return [issue("safetensors.library_mismatch", reason="tensor order by offset differs")]
    if metadata != header.metadata:
        return [issue("safetensors.library_mismatch", reason="__metadata__ differs")]
    return []
