"""Deploy checks for the engine boundary (`manage.py check --deploy`): outside debug, every engine
has its own key, long enough, given to no other engine (docs/security.md, class 5)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register

# 32 characters: 128 bits or more for the hex or URL-safe keys `secrets` makes.
MIN_ENGINE_KEY_LENGTH = 32


@register(Tags.security, deploy=True)
def check_engine_keys(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if settings.DEBUG:
        return []
    keys: dict[str, Any] = settings.PORTAL_ENGINE_KEYS
    errors: list[CheckMessage] = []
    if settings.PORTAL_ENGINE_KEY:
        errors.append(
            Error(
                "PORTAL_ENGINE_KEY (one key for every engine) is set; outside debug it is not "
                "used: an engine's key goes only to that engine.",
                hint="Give each engine its own key in PORTAL_ENGINE_KEYS and unset PORTAL_ENGINE_KEY.",
                id="workers.E001",
            )
        )
    if not keys:
        errors.append(
            Error(
                "PORTAL_ENGINE_KEYS is empty: the portal has no key for any engine, and refuses "
                "to talk to engines without one.",
                hint='Set PORTAL_ENGINE_KEYS=\'{"<engine name>": "<key>"}\' and start each '
                "engine with its key (PORTAL_ENGINE_KEY and VLLM_API_KEY on the engine).",
                id="workers.E002",
            )
        )
    short = sorted(
        name
        for name, key in keys.items()
        if not isinstance(key, str) or len(key) < MIN_ENGINE_KEY_LENGTH
    )
    if short:
        errors.append(
            Error(
                f"Engine keys shorter than {MIN_ENGINE_KEY_LENGTH} characters: {', '.join(short)}.",
                hint='Make them with: python -c "import secrets; print(secrets.token_hex(32))"',
                id="workers.E003",
            )
        )
    shared = _engines_sharing_a_key(keys)
    if shared:
        errors.append(
            Error(
                f"Engines share a key: {'; '.join(', '.join(group) for group in shared)}. Each "
                "engine's host could then call the others.",
                hint="Give every engine its own key in PORTAL_ENGINE_KEYS.",
                id="workers.E004",
            )
        )
    missing = _registered_engines_without_a_key(keys)
    if missing:
        errors.append(
            Error(
                f"Registered engines without a key in PORTAL_ENGINE_KEYS: {', '.join(missing)}. "
                "The prober keeps them down (engine.key_missing).",
                hint="Add their keys to PORTAL_ENGINE_KEYS, or delete the engines.",
                id="workers.E005",
            )
        )
    return errors


def _engines_sharing_a_key(keys: dict[str, Any]) -> list[list[str]]:
    by_key: dict[str, list[str]] = {}
    for name, key in keys.items():
        if isinstance(key, str) and key:
            by_key.setdefault(key, []).append(name)
    return sorted(sorted(names) for names in by_key.values() if len(names) > 1)


def _registered_engines_without_a_key(keys: dict[str, Any]) -> list[str]:
    """Engine rows the keys do not cover; nothing when the database cannot be read (a check
    run before migrate, or on a build machine without one)."""
    from workers.models import Engine

    try:
        names = list(Engine.objects.order_by("name").values_list("name", flat=True))
    except Exception:  # noqa: BLE001 - no database here: the runtime refusal still holds
        return []
    return [name for name in names if not keys.get(name)]
