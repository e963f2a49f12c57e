"""The upload page: adapter_config + adapter_model (+ signature) streamed to `version_upload`;
aborting a pending direct upload."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from adapters.pages.lookup import adapter_in_scope
from adapters.services.direct_uploads import direct_upload_abort, pending_upload_get
from adapters.services.uploads import MAX_SIGNATURE_BYTES, IncomingFile, version_upload
from core.errors import ApplicationError
from core.request import PortalRequest
from tenants.pagekit import page_view, render_page

FILE_FIELDS = ("adapter_config", "adapter_model")


def _incoming(request: PortalRequest, field: str) -> IncomingFile:
    uploaded = request.FILES.get(field)
    if uploaded is None:
        raise ApplicationError("upload.missing_file", f"Choose a file for '{field}'.")
    return IncomingFile(uploaded, uploaded.size)


def _signature(request: PortalRequest) -> bytes | None:
    uploaded = request.FILES.get("signature")
    # One byte past the limit, so the service can tell a too-large signature from a full one.
    return uploaded.read(MAX_SIGNATURE_BYTES + 1) if uploaded is not None else None


@page_view
def version_upload_page(request: PortalRequest, tenant: str, adapter: str) -> HttpResponse:
    scope, found = adapter_in_scope(request, tenant, adapter)
    scope.access.require_adapter(found, "upload_version")
    context = {
        "tenant": scope.tenant,
        "adapter": found,
        "max_model_bytes": settings.ADAPTER_MAX_MODEL_BYTES,
        "max_config_bytes": settings.ADAPTER_MAX_CONFIG_BYTES,
    }
    if request.method != "POST":
        return render_page(request, "adapters/upload.html", context)
    try:
        version = version_upload(
            access=scope.access,
            adapter=found,
            config=_incoming(request, "adapter_config"),
            model=_incoming(request, "adapter_model"),
            signature=_signature(request),
            request_id=request.request_id,
        )
    except ApplicationError as exc:
        return render_page(request, "adapters/upload.html", context, error=exc)
    return redirect("version-detail", tenant=tenant, adapter=adapter, number=version.number)


@page_view
@require_POST
def direct_upload_abort_page(
    request: PortalRequest, tenant: str, adapter: str, upload: str
) -> HttpResponse:
    """Abort a pending direct-to-storage upload (started through the API) from the adapter page:
    the uploader's own, or anyone's for the tenant's owners (the service decides)."""
    scope, found = adapter_in_scope(request, tenant, adapter)
    scope.access.require_adapter(found, "upload_version")
    pending = pending_upload_get(access=scope.access, adapter=found, public_id=upload)
    direct_upload_abort(access=scope.access, upload=pending, request_id=request.request_id)
    messages.success(request, f"Pending upload {upload[:8]}… aborted; its parts are deleted.")
    return redirect("adapter-detail", tenant=tenant, adapter=adapter)
