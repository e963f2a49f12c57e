"""Panels that apps above the registry add to its version page (the eval gate's run and cases).

The registry's page never imports them: an app registers a panel source in its
AppConfig.ready(); the version page renders whatever panels the sources return, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.http import HttpRequest

from adapters.models import AdapterVersion
from tenants.access_port import Access


@dataclass(frozen=True)
class Panel:
    template: str
    context: dict[str, Any]


class PanelSource(Protocol):
    def __call__(
        self, *, request: HttpRequest, access: Access, version: AdapterVersion
    ) -> Panel | None: ...


_sources: list[PanelSource] = []


def register(source: PanelSource) -> None:
    if source not in _sources:
        _sources.append(source)


def version_panels(*, request: HttpRequest, access: Access, version: AdapterVersion) -> list[Panel]:
    found = (source(request=request, access=access, version=version) for source in _sources)
    return [panel for panel in found if panel is not None]
