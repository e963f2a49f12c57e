"""Suite files for the eval tests: small, built in code."""

from __future__ import annotations

import json
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile


def jsonl(*cases: dict[str, Any]) -> bytes:
    return "".join(json.dumps(case) + "\n" for case in cases).encode()


CASES = (
    {
        "id": "greet",
        "prompt": "Say hello.",
        "max_tokens": 8,
        "expect": {"contains": ["hello"]},
        "tags": ["smoke"],
    },
    {
        "id": "refund",
        "messages": [{"role": "user", "content": "Refund window?"}],
        "expect": {"regex": r"\d+ days"},
        "must_pass": True,
        "tags": ["policy"],
    },
    {"id": "free", "prompt": "Write a haiku.", "tags": ["style"]},
)


def push(client: Any, tenant: str, name: str, raw: bytes) -> Any:
    return client.post(
        f"/api/v1/tenants/{tenant}/eval-suites/",
        {"name": name, "file": SimpleUploadedFile("suite.jsonl", raw)},
        format="multipart",
    )
