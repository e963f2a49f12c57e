"""Large uploads without holding them: a generated adapter, a streamed multipart body, and the
portal as a uvicorn subprocess under a memory limit, with its peak RSS.

Shared by bench/upload_memory.py and the API upload tests (tests/adapters/test_upload_*.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from adapters.validation.base_model import BaseModelSpec

REPO = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024
CHUNK = MiB
RANK = 64
STARTUP_DEADLINE_SECONDS = 60  # only bounds the wait for a server that never comes up

# Llama-3-70B's shapes (hidden 8192, 64 heads of 128, 8 KV heads, intermediate 28672), so a large
# adapter needs few layers and its tensors are ordinary LoRA pairs.
BIG_BASE_MODEL = "bench-llama-70b"
BIG_HF_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": 80,
    "vocab_size": 128256,
}
# (in, out) of each projection, derived the way validation derives it.
BIG_SPEC = BaseModelSpec.from_hf_config(BIG_HF_CONFIG, BIG_BASE_MODEL)
BIG_MODULE_DIMS: dict[str, tuple[int, int]] = dict(BIG_SPEC.module_dims)


def _finite_block() -> bytes:
    # Random bf16 bit patterns with the top exponent bit cleared: every value is finite.
    rng = np.random.default_rng(0)
    return (rng.integers(0, 1 << 16, CHUNK // 2, dtype=np.uint16) & 0xBFFF).astype("<u2").tobytes()


class GeneratedAdapter:
    """A valid bf16 rank-64 LoRA adapter for BIG_HF_CONFIG of about `target_bytes`, produced as it
    is read: `model_chunks()` yields the safetensors file and hashes it on the way, so neither the
    caller nor the test process ever holds it. Same `target_bytes` => same bytes."""

    def __init__(self, target_bytes: int, *, layers: int | None = None):
        per_layer = sum(RANK * (d_in + d_out) * 2 for d_in, d_out in BIG_MODULE_DIMS.values())
        self.layers = layers or max(1, min(80, round(target_bytes / per_layer)))
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for layer in range(self.layers):
            for module, (d_in, d_out) in BIG_MODULE_DIMS.items():
                stem = f"base_model.model.model.layers.{layer}.{BIG_SPEC.module_path(module)}"
                for matrix, shape in (("A", [RANK, d_in]), ("B", [d_out, RANK])):
                    size = shape[0] * shape[1] * 2
                    header[f"{stem}.lora_{matrix}.weight"] = {
                        "dtype": "BF16",
                        "shape": shape,
                        "data_offsets": [offset, offset + size],
                    }
                    offset += size
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self._head = struct.pack("<Q", len(raw)) + raw
        self._data_bytes = offset
        self.model_size = len(self._head) + offset
        self.config_bytes = json.dumps(
            {
                "peft_type": "LORA",
                "task_type": "CAUSAL_LM",
                "r": RANK,
                "lora_alpha": 2 * RANK,
                "lora_dropout": 0.0,
                "bias": "none",
                "target_modules": list(BIG_MODULE_DIMS),
                "use_dora": False,
                "modules_to_save": None,
                "base_model_name_or_path": BIG_BASE_MODEL,
            }
        ).encode()
        self._sha256: str | None = None

    def write(self, folder: Path) -> Path:
        """Write the adapter's two files into `folder`, streaming (never whole in memory)."""
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / "adapter_model.safetensors", "wb") as out:
            for chunk in self.model_chunks():
                out.write(chunk)
        (folder / "adapter_config.json").write_bytes(self.config_bytes)
        return folder

    def model_chunks(self) -> Iterator[bytes]:
        hasher = hashlib.sha256()
        hasher.update(self._head)
        yield self._head
        block = _finite_block()
        remaining = self._data_bytes
        while remaining:
            chunk = block if remaining >= len(block) else block[:remaining]
            hasher.update(chunk)
            remaining -= len(chunk)
            yield chunk
        self._sha256 = hasher.hexdigest()

    @property
    def sha256(self) -> str:
        """The digest of what model_chunks() handed out; read the whole stream first."""
        if self._sha256 is None:
            raise RuntimeError("model_chunks() has not been read to the end")
        return self._sha256


@dataclass
class MultipartBody:
    """A multipart/form-data body streamed from parts (bytes, or (size, chunk iterator))."""

    parts: list[tuple[str, str, Any]]  # (field name, filename, bytes | (size, iterator))
    boundary: str = field(default_factory=lambda: f"lp-{uuid.uuid4().hex}")

    def _head(self, name: str, filename: str) -> bytes:
        return (
            f'--{self.boundary}\r\nContent-Disposition: form-data; name="{name}"; '
            f'filename="{filename}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    @property
    def length(self) -> int:
        total = len(f"--{self.boundary}--\r\n")
        for name, filename, body in self.parts:
            size = len(body) if isinstance(body, bytes) else body[0]
            total += len(self._head(name, filename)) + size + 2
        return total

    def __iter__(self) -> Iterator[bytes]:
        for name, filename, body in self.parts:
            yield self._head(name, filename)
            if isinstance(body, bytes):
                yield body
            else:
                yield from body[1]
            yield b"\r\n"
        yield f"--{self.boundary}--\r\n".encode()


def adapter_upload_body(adapter: GeneratedAdapter, signature: bytes | None = None) -> MultipartBody:
    parts: list[tuple[str, str, Any]] = [
        ("adapter_config", "adapter_config.json", adapter.config_bytes),
        (
            "adapter_model",
            "adapter_model.safetensors",
            (adapter.model_size, adapter.model_chunks()),
        ),
    ]
    if signature is not None:
        parts.append(("signature", "signature", signature))
    return MultipartBody(parts)


def post_streamed(
    url: str, body: MultipartBody, token: str, *, timeout: float = 600
) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": body.content_type,
        "Content-Length": str(body.length),
    }
    return httpx.post(url, content=iter(body), headers=headers, timeout=timeout)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _limit_memory(limit_bytes: int | None) -> Any:
    def preexec() -> None:
        os.setsid()
        if limit_bytes is not None:
            # Heap and private mappings: the portal cannot grow past this, whatever it tries.
            resource.setrlimit(resource.RLIMIT_DATA, (limit_bytes, limit_bytes))
        try:  # the kernel stops the server if the test process dies without teardown
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
        except (OSError, AttributeError):
            pass

    return preexec


class PortalServer:
    """`uvicorn portal.asgi:application` in a child process on a free loopback port.

    `env` is added to the environment (database, storage, settings module); `memory_limit` sets
    RLIMIT_DATA in the child before exec. `peak_rss()` is the child's VmHWM.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        memory_limit: int | None = None,
        log_path: Path | None = None,
    ):
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        self.memory_limit = memory_limit
        self.log_path = (
            log_path
            or Path(os.environ.get("TMPDIR", "/tmp")) / f"portal-{uuid.uuid4().hex[:8]}.log"
        )
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PortalServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        for _ in range(3):  # another process may take the free port before uvicorn binds it
            self.port = free_port()
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "portal.asgi:application",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(self.port),
                        "--lifespan",
                        "off",
                        "--no-access-log",
                        "--log-level",
                        "warning",
                        "--workers",
                        "1",
                    ],
                    cwd=REPO,
                    env=self.env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    preexec_fn=_limit_memory(self.memory_limit),
                )
            if self._wait_until_serving():
                return
            self.stop()
        raise RuntimeError(f"the portal did not start:\n{self.log_tail()}")

    def _wait_until_serving(self) -> bool:
        assert self.proc is not None
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                httpx.get(f"{self.url}/api/v1/tenants/", timeout=2)
                return True  # any answer (401 here) means the app is up
            except httpx.TransportError:
                time.sleep(0.1)
        return False

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM, VmData of the server, in bytes."""
        assert self.proc is not None
        values: dict[str, int] = {}
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "VmData"):
                values[key] = int(rest.split()[0]) * 1024
        return values

    def peak_rss(self) -> int:
        return self.status()["VmHWM"]

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
