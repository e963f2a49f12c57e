"""What OPTIONS answers on the API: the view's name, description, renderers and parsers.

DRF's SimpleMetadata also describes the PUT and POST bodies, by running the view's object lookup
and serializer for a request that never happens: on a view whose objects are not rows
(`/api/v1/cost/settings/`) that lookup raised, a 500. The bodies are in /api/schema/.
"""

from __future__ import annotations

from typing import Any

from rest_framework.metadata import SimpleMetadata


class ApiMetadata(SimpleMetadata):
    def determine_actions(self, request: Any, view: Any) -> dict[str, Any]:
        return {}

    def determine_metadata(self, request: Any, view: Any) -> dict[str, Any]:
        metadata = super().determine_metadata(request, view)
        metadata.pop("actions", None)
        return metadata
