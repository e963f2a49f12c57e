"""Build the configured storage backend from Django settings; the only place settings are read."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from .base import AdapterStorage
from .errors import StorageMisconfigured
from .keys import DEFAULT_ALLOWED_PREFIXES


def get_storage() -> AdapterStorage:
    """The backend named by ADAPTER_STORAGE_BACKEND; reused while the settings stay the same.

    Keyed on the setting values, so `override_settings` in tests gets a fresh backend without
    listening to signals.
    """
    from django.conf import settings

    backend = getattr(settings, "ADAPTER_STORAGE_BACKEND", "local")
    prefixes = _prefixes(getattr(settings, "S3_ALLOWED_PREFIXES", DEFAULT_ALLOWED_PREFIXES))
    if backend == "local":
        root = getattr(settings, "ADAPTER_STORAGE_ROOT", "")
        if not root:
            raise StorageMisconfigured("ADAPTER_STORAGE_ROOT is required for the local backend")
        return _build("local", prefixes, str(root))
    if backend == "s3":
        values = tuple(
            str(getattr(settings, name, "") or "")
            for name in (
                "S3_BUCKET",
                "S3_ENDPOINT_URL",
                "S3_REGION",
                "S3_ACCESS_KEY_ID",
                "S3_SECRET_ACCESS_KEY",
                "S3_PRESIGN_ENDPOINT_URL",
            )
        )
        if not values[0]:
            raise StorageMisconfigured("S3_BUCKET is required when ADAPTER_STORAGE_BACKEND=s3")
        if bool(values[3]) != bool(values[4]):
            raise StorageMisconfigured(
                "set both S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY, or neither "
                "(to use the default AWS credential chain)"
            )
        return _build("s3", prefixes, *values)
    raise StorageMisconfigured(f"ADAPTER_STORAGE_BACKEND={backend!r} must be 'local' or 's3'")


def _prefixes(raw: Any) -> tuple[str, ...]:
    # The setting may come as a list or as a comma-separated environment string.
    items: Iterable[Any] = raw.split(",") if isinstance(raw, str) else raw
    return tuple(str(item).strip() for item in items if str(item).strip())


@functools.lru_cache(maxsize=8)
def _build(backend: str, prefixes: tuple[str, ...], *values: str) -> AdapterStorage:
    if backend == "local":
        from .local import LocalDiskStorage

        return LocalDiskStorage(values[0], allowed_prefixes=prefixes)
    from .s3 import S3Storage

    bucket, endpoint, region, key_id, secret, presign_endpoint = values
    return S3Storage(
        bucket,
        endpoint_url=endpoint or None,
        region=region or None,
        access_key_id=key_id or None,
        secret_access_key=secret or None,
        allowed_prefixes=prefixes,
        presign_endpoint_url=presign_endpoint or None,
    )
