"""A budget's scope as written: `tenant`, `token:<api token id>` or `alias:<alias name>`."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class ScopeKind(enum.StrEnum):
    TENANT = "tenant"
    TOKEN = "token"
    ALIAS = "alias"


@dataclass(frozen=True, slots=True)
class Scope:
    kind: ScopeKind
    token_id: int | None = None
    alias: str = ""

    def __str__(self) -> str:
        if self.kind == ScopeKind.TOKEN:
            return f"token:{self.token_id}"
        if self.kind == ScopeKind.ALIAS:
            return f"alias:{self.alias}"
        return "tenant"


_TOKEN = re.compile(r"^token:([0-9]{1,18})$")
_ALIAS = re.compile(r"^alias:([a-z0-9][a-z0-9-]{0,39})$")


def parse_scope(text: str) -> Scope | None:
    """The scope `text` names, or None when it is not one of the three forms."""
    if text == "tenant":
        return Scope(ScopeKind.TENANT)
    if match := _TOKEN.match(text):
        return Scope(ScopeKind.TOKEN, token_id=int(match.group(1)))
    if match := _ALIAS.match(text):
        return Scope(ScopeKind.ALIAS, alias=match.group(1))
    return None
