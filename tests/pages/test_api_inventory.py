"""Every API action is placed on a page (or said why not), and those pages are in the matrix."""

from django.urls import URLPattern, URLResolver, get_resolver

from tests.pages.api_inventory import NOT_ON_PAGES, PAGES_FOR_API
from tests.pages.routes import PAGE_ROUTES

# HEAD and OPTIONS come with GET and with every route; they are not actions of their own.
METHODS = ("get", "post", "put", "patch", "delete")


def _api_actions(patterns, prefix=""):
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from _api_actions(entry.url_patterns, route)
        elif isinstance(entry, URLPattern) and route.startswith("api/v1/"):
            actions = getattr(entry.callback, "actions", None)
            if actions is not None:  # a viewset route: one action per HTTP method
                yield from ((entry.name, m) for m in actions if m in METHODS)
            else:
                # as_view() sets view_class on the function it returns; the stubs type a Callable.
                cls = entry.callback.view_class  # type: ignore[attr-defined]
                yield from (
                    (entry.name, m)
                    for m in ("get", "post", "put", "patch", "delete")
                    if hasattr(cls, m)
                )


def test_every_api_action_is_placed():
    on_api = set(_api_actions(get_resolver().url_patterns))
    placed = set(PAGES_FOR_API) | set(NOT_ON_PAGES)
    assert on_api - placed == set(), "API actions no page offers: add a page or say why not"
    assert placed - on_api == set(), "api_inventory.py names API actions that do not exist"
    assert not set(PAGES_FOR_API) & set(NOT_ON_PAGES)


def test_the_pages_named_are_in_the_route_matrix():
    in_matrix = {route.name for route in PAGE_ROUTES}
    named = {page for pages in PAGES_FOR_API.values() for page in pages}
    assert named - in_matrix == set(), "pages the inventory names but the matrix does not test"
