"""What apps above the registry add to its pages: panels on the version page (the eval gate's
run and cases) and a note per version in the review queue (the gate's state).

The registry's pages never import them: an app registers its sources in its AppConfig.ready();
the pages render whatever the sources return, in order.
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


class QueueNotes(Protocol):
    def __call__(self, *, versions: list[AdapterVersion]) -> dict[int, str]: ...


_queue_notes: list[QueueNotes] = []


def register_queue_notes(source: QueueNotes) -> None:
    if source not in _queue_notes:
        _queue_notes.append(source)


def queue_notes(*, versions: list[AdapterVersion]) -> dict[int, list[str]]:
    """Version id -> the notes the sources give it (one batch call per source)."""
    notes: dict[int, list[str]] = {}
    for source in _queue_notes:
        for version_id, note in source(versions=versions).items():
            notes.setdefault(version_id, []).append(note)
    return notes
