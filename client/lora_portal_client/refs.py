"""Names on the command line: `tenant/adapter@N` (a version), `tenant/adapter`, `tenant/alias`."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lora_portal_client.errors import usage_error

_SLUG = r"[A-Za-z0-9_-]+"
_VERSION = re.compile(rf"^(?P<tenant>{_SLUG})/(?P<adapter>{_SLUG})@(?P<number>[0-9]{{1,9}})$")
_PAIR = re.compile(rf"^(?P<tenant>{_SLUG})/(?P<name>{_SLUG})$")
_TARGET = re.compile(rf"^(?P<version>{_SLUG}@[0-9]{{1,9}})=(?P<weight>[0-9]{{1,3}})$")


@dataclass(frozen=True)
class AdapterRef:
    tenant: str
    adapter: str

    @classmethod
    def parse(cls, text: str) -> AdapterRef:
        return cls(*_pair(text, "adapter"))

    def __str__(self) -> str:
        return f"{self.tenant}/{self.adapter}"


@dataclass(frozen=True)
class VersionRef:
    tenant: str
    adapter: str
    number: int

    @classmethod
    def parse(cls, text: str) -> VersionRef:
        found = _VERSION.match(text)
        if not found:
            raise usage_error("usage.bad_version", f"'{text}' is not TENANT/ADAPTER@N.")
        return cls(found["tenant"], found["adapter"], int(found["number"]))

    def __str__(self) -> str:
        return f"{self.tenant}/{self.adapter}@{self.number}"


@dataclass(frozen=True)
class AliasRef:
    tenant: str
    name: str

    @classmethod
    def parse(cls, text: str) -> AliasRef:
        return cls(*_pair(text, "alias"))

    def __str__(self) -> str:
        return f"{self.tenant}/{self.name}"


def _pair(text: str, what: str) -> tuple[str, str]:
    found = _PAIR.match(text)
    if not found:
        raise usage_error(f"usage.bad_{what}", f"'{text}' is not TENANT/{what.upper()}.")
    return found["tenant"], found["name"]


def parse_target(text: str) -> dict[str, object]:
    """`support@4=10` -> {"version": "support@4", "weight": 10} (an alias target)."""
    found = _TARGET.match(text)
    if not found:
        raise usage_error(
            "usage.bad_target", f"'{text}' is not ADAPTER@N=WEIGHT (e.g. support@4=10)."
        )
    return {"version": found["version"], "weight": int(found["weight"])}
