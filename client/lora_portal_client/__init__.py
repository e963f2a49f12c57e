"""The LoRA Portal's Python client library (`Client`) and its command line (`lora-portal`)."""

from lora_portal_client.client import Client
from lora_portal_client.errors import ApiError, ExitCode, PortalError
from lora_portal_client.refs import AdapterRef, AliasRef, VersionRef

__all__ = [
    "AdapterRef",
    "AliasRef",
    "ApiError",
    "Client",
    "ExitCode",
    "PortalError",
    "VersionRef",
]
