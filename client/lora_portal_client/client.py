"""`Client`: the portal's REST API as typed Python calls; the CLI is a thin layer over it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import httpx

from lora_portal_client import paths
from lora_portal_client.config import load_settings
from lora_portal_client.errors import ApiError, PortalError
from lora_portal_client.refs import AdapterRef, AliasRef, VersionRef

Json = dict[str, Any]
USER_AGENT = "lora-portal-client/0.1"


class Client:
    def __init__(self, url: str, token: str | None = None, *, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        # Presigned part URLs go to object storage: a client of its own, which never carries the
        # portal's token.
        self._storage = httpx.Client(headers={"User-Agent": USER_AGENT}, timeout=timeout)

    @classmethod
    def from_environment(cls) -> Client:
        """URL and token from LORA_PORTAL_URL / LORA_PORTAL_TOKEN or the config file."""
        settings = load_settings()
        return cls(settings.url, settings.require_token())

    def close(self) -> None:
        self._http.close()
        self._storage.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ---
    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise PortalError("network.unreachable", f"{self.url}: {exc}") from None
        if response.status_code >= 400:
            raise ApiError.from_response(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Json:
        response = self.request(method, path, **kwargs)
        if response.status_code == 204:
            return {}
        try:
            body = response.json()
        except ValueError:
            raise PortalError(
                "response.not_json", f"{method} {path} answered {response.status_code}, not JSON."
            ) from None
        return body if isinstance(body, dict) else {"results": body}

    def _all_pages(self, path: str, params: dict[str, Any] | None = None) -> list[Json]:
        rows: list[Json] = []
        body = self._json("GET", path, params={**(params or {}), "page_size": 200})
        rows.extend(body.get("results", []))
        while body.get("next"):
            body = self._json("GET", self._own_url(str(body["next"])))
            rows.extend(body.get("results", []))
        return rows

    def _own_url(self, url: str) -> str:
        """A URL the portal answered (a page's `next`): followed only on the portal's own
        origin, since every request carries the token."""
        absolute = bool(urlsplit(url).scheme) or url.startswith("//")
        if absolute and not same_origin(url, self.url):
            raise PortalError(
                "response.foreign_url",
                f"The portal's answer points to {url}, outside {self.url}; not followed "
                "(the token would go with it).",
            )
        return url

    @contextmanager
    def stream(self, path: str, params: dict[str, Any]) -> Iterator[httpx.Response]:
        """A GET whose body is read piece by piece (exports), never whole."""
        try:
            # Any type: the export's format is the query's (`format=csv|jsonl`), errors are JSON.
            headers = {"Accept": "*/*"}
            with self._http.stream("GET", path, params=params, headers=headers) as response:
                if response.status_code >= 400:
                    response.read()
                    raise ApiError.from_response(response)
                yield response
        except httpx.TransportError as exc:
            raise PortalError("network.unreachable", f"{self.url}: {exc}") from None

    # --- who ---
    def token_obtain(
        self,
        *,
        username: str,
        password: str,
        scopes: list[str],
        tenant: str | None = None,
        name: str = "lora-portal cli",
        expires_in_days: int = 90,
    ) -> Json:
        body = {
            "username": username,
            "password": password,
            "scopes": scopes,
            "tenant": tenant,
            "name": name,
            "expires_in_days": expires_in_days,
        }
        return self._json("POST", paths.TOKEN, json=body)

    def whoami(self) -> Json:
        return self._json("GET", paths.ME)

    # --- adapters and versions ---
    def adapter(self, ref: AdapterRef) -> Json:
        return self._json("GET", paths.ADAPTER.format(tenant=ref.tenant, adapter=ref.adapter))

    def versions(self, ref: AdapterRef, *, status: str | None = None) -> list[Json]:
        path = paths.VERSIONS.format(tenant=ref.tenant, adapter=ref.adapter)
        return self._all_pages(path, {"status": status} if status else None)

    def version(self, ref: VersionRef) -> Json:
        return self._json("GET", _version_path(paths.VERSION, ref))

    def residency(self, ref: VersionRef) -> list[Json]:
        body = self._json("GET", _version_path(paths.VERSION_ACTION["residency"], ref))
        return list(body.get("results", []))

    def approve(
        self, ref: VersionRef, *, comment: str = "", override_reason: str | None = None
    ) -> Json:
        """Approve; with `override_reason`, despite a failed eval gate (a second reviewer)."""
        body: Json = {"comment": comment}
        if override_reason is not None:
            body.update(override_eval_gate=True, reason=override_reason)
        return self._version_action(ref, "approve", body)

    def reject(self, ref: VersionRef, *, reason: str) -> Json:
        return self._version_action(ref, "reject", {"reason": reason})

    def release(self, ref: VersionRef, *, comment: str = "") -> Json:
        return self._version_action(ref, "release", {"comment": comment})

    def disable(self, ref: VersionRef, *, reason: str = "") -> Json:
        return self._version_action(ref, "disable", {"reason": reason})

    def _version_action(self, ref: VersionRef, action: str, body: Json) -> Json:
        return self._json("POST", _version_path(paths.VERSION_ACTION[action], ref), json=body)

    def upload_version(
        self, ref: AdapterRef, directory: Path, *, signature: bytes | None = None
    ) -> Json:
        """The plain multipart upload: both files in one request (httpx streams them)."""
        path = paths.VERSIONS.format(tenant=ref.tenant, adapter=ref.adapter)
        with (
            open(directory / "adapter_config.json", "rb") as config,
            open(directory / "adapter_model.safetensors", "rb") as model,
        ):
            files: dict[str, Any] = {
                "adapter_config": ("adapter_config.json", config, "application/json"),
                "adapter_model": ("adapter_model.safetensors", model, "application/octet-stream"),
            }
            if signature is not None:
                files["signature"] = ("signature", signature, "application/octet-stream")
            return self._json("POST", path, files=files)

    # --- direct-to-S3 uploads ---
    def direct_upload_start(
        self, ref: AdapterRef, *, model_size: int, config_text: str, part_size: int | None = None
    ) -> Json:
        body: Json = {"model_size": model_size, "config": config_text}
        if part_size:
            body["part_size"] = part_size
        path = paths.UPLOADS.format(tenant=ref.tenant, adapter=ref.adapter)
        return self._json("POST", path, json=body)

    def put_part(self, url: str, chunks: Iterator[bytes], size: int) -> str:
        """PUT one part to its presigned URL; the ETag is what completion needs."""
        try:
            response = self._storage.put(url, content=chunks, headers={"Content-Length": str(size)})
        except httpx.TransportError as exc:
            raise PortalError("upload.storage_unreachable", f"Object storage: {exc}") from None
        if response.status_code >= 400:
            raise PortalError(
                "upload.part_refused",
                f"Object storage refused a part ({response.status_code}): {response.text[:300]}",
            )
        return response.headers["ETag"]

    def direct_upload_complete(
        self,
        ref: AdapterRef,
        upload: str,
        *,
        parts: list[Json],
        sha256: str,
        signature: str | None = None,
    ) -> Json:
        body: Json = {"parts": parts, "sha256": sha256}
        if signature is not None:
            body["signature"] = signature
        path = paths.UPLOAD_COMPLETE.format(tenant=ref.tenant, adapter=ref.adapter, upload=upload)
        return self._json("POST", path, json=body)

    def direct_upload_abort(self, ref: AdapterRef, upload: str) -> None:
        path = paths.UPLOAD.format(tenant=ref.tenant, adapter=ref.adapter, upload=upload)
        self.request("DELETE", path)

    # --- aliases ---
    # --- budgets ---
    def budgets(self, tenant: str) -> list[Json]:
        return self._all_pages(paths.BUDGETS.format(tenant=tenant))

    def budget_create(self, tenant: str, body: Json) -> Json:
        return self._json("POST", paths.BUDGETS.format(tenant=tenant), json=body)

    def budget_update(self, tenant: str, budget: int, body: Json) -> Json:
        return self._json("PATCH", paths.BUDGET.format(tenant=tenant, budget=budget), json=body)

    def budget_raise_request(self, tenant: str, budget: int, body: Json) -> Json:
        return self._json(
            "POST", paths.BUDGET_RAISES.format(tenant=tenant, budget=budget), json=body
        )

    def alias(self, ref: AliasRef) -> Json:
        return self._json("GET", paths.ALIAS.format(tenant=ref.tenant, alias=ref.name))

    def alias_set(
        self, ref: AliasRef, *, targets: list[Json], guard: Json | None = None, reason: str = ""
    ) -> Json:
        """Create the alias, or replace its targets if it exists."""
        body: Json = {"targets": targets, "reason": reason}
        if guard:
            body["guard"] = guard
        try:
            return self._json(
                "PUT", paths.ALIAS.format(tenant=ref.tenant, alias=ref.name), json=body
            )
        except ApiError as exc:
            if exc.code != "alias.not_found":
                raise
        path = paths.ALIASES.format(tenant=ref.tenant)
        return self._json("POST", path, json={**body, "name": ref.name})

    def alias_promote(self, ref: AliasRef, *, version: str, reason: str = "") -> Json:
        path = paths.ALIAS_PROMOTE.format(tenant=ref.tenant, alias=ref.name)
        return self._json("POST", path, json={"version": version, "reason": reason})

    def alias_rollback(self, ref: AliasRef, *, reason: str = "") -> Json:
        path = paths.ALIAS_ROLLBACK.format(tenant=ref.tenant, alias=ref.name)
        return self._json("POST", path, json={"reason": reason})

    # --- release plans ---
    def release_plan_start(self, ref: AliasRef, body: Json) -> Json:
        path = paths.RELEASES.format(tenant=ref.tenant, alias=ref.name)
        return self._json("POST", path, json=body)

    def release_plan_newest(self, ref: AliasRef) -> Json | None:
        """The alias's newest plan (the API lists them newest first), or None."""
        path = paths.RELEASES.format(tenant=ref.tenant, alias=ref.name)
        rows = self._json("GET", path, params={"page_size": 1}).get("results", [])
        return rows[0] if rows else None

    def release_plan(self, ref: AliasRef, plan: int) -> Json:
        return self._json("GET", paths.RELEASE.format(tenant=ref.tenant, alias=ref.name, plan=plan))

    def release_plan_act(self, ref: AliasRef, plan: int, action: str, *, reason: str = "") -> Json:
        path = paths.RELEASE_ACTION[action].format(tenant=ref.tenant, alias=ref.name, plan=plan)
        return self._json("POST", path, json={"reason": reason})

    # --- numbers and records ---
    def usage(
        self, *, tenant: str | None, params: dict[str, str], csv: bool = False
    ) -> httpx.Response:
        path = paths.TENANT_USAGE.format(tenant=tenant) if tenant else paths.USAGE
        accept = "text/csv" if csv else "application/json"
        return self.request("GET", path, params=params, headers={"Accept": accept})

    def evidence_keys(self) -> Json:
        """The portal's published evidence keys: the current one and those it signed with before."""
        return self._json("GET", paths.EVIDENCE_KEY)

    def evidence_to(self, ref: VersionRef, sink: BinaryIO) -> int:
        """The version's compliance record, written as the portal sent it (byte for byte)."""
        return self.download(_version_path(paths.EVIDENCE, ref), {}, sink)

    def audit_export_to(self, params: dict[str, str], sink: BinaryIO) -> int:
        return self.download(paths.AUDIT_EXPORT, params, sink)

    def download(self, path: str, params: dict[str, str], sink: BinaryIO) -> int:
        written = 0
        with self.stream(path, params) as response:
            for chunk in response.iter_bytes(64 * 1024):
                sink.write(chunk)
                written += len(chunk)
        return written

    def cost(self, params: dict[str, str]) -> Json:
        return self._json("GET", paths.COST, params=params)

    # --- the eval gate ---
    def eval_suite_push(self, tenant: str, name: str, path: Path) -> Json:
        with open(path, "rb") as suite:
            files = {"file": (path.name, suite, "application/x-ndjson")}
            return self._json(
                "POST", paths.EVAL_SUITES.format(tenant=tenant), data={"name": name}, files=files
            )

    def eval_suites(self, tenant: str) -> list[Json]:
        return self._all_pages(paths.EVAL_SUITES.format(tenant=tenant))

    def eval_runs(self, ref: VersionRef) -> list[Json]:
        return self._all_pages(_version_path(paths.EVAL_RUNS, ref))

    def eval_run_start(self, ref: VersionRef) -> Json:
        """A run of REF on its adapter's policy suite (or the one already under way)."""
        return self._json("POST", _version_path(paths.EVAL_RUNS, ref), json={})

    def eval_run(self, ref: VersionRef, run: int) -> Json:
        return self._json("GET", _version_path(paths.EVAL_RUN, ref, run=run))

    def eval_cases_to(self, ref: VersionRef, run: int, sink: BinaryIO) -> int:
        path = _version_path(paths.EVAL_CASES, ref, run=run)
        return self.download(path, {"format": "jsonl"}, sink)


def same_origin(url: str, base: str) -> bool:
    """Same scheme, host and port (default ports filled in)."""

    def origin(value: str) -> tuple[str, str, int | None]:
        parts = urlsplit(value)
        scheme = parts.scheme.lower()
        try:
            port = parts.port or {"http": 80, "https": 443}.get(scheme)
        except ValueError:
            return ("", "", None)
        return scheme, (parts.hostname or "").lower(), port

    return origin(url) == origin(base) and bool(origin(base)[1])


def _version_path(template: str, ref: VersionRef, **more: Any) -> str:
    return template.format(tenant=ref.tenant, adapter=ref.adapter, number=ref.number, **more)
