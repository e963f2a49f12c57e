"""Every page on the URL resolver is in PAGE_ROUTES, so the matrix cannot miss one."""

from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.pages.routes import NOT_PAGES, PAGE_ROUTES

SKIPPED_PREFIXES = ("api/", "admin/")


def _page_names(patterns, prefix=""):
    for entry in patterns:
        route = prefix + str(entry.pattern)
        if route.startswith(SKIPPED_PREFIXES):
            continue
        if isinstance(entry, URLResolver):
            yield from _page_names(entry.url_patterns, route)
        elif isinstance(entry, URLPattern) and entry.name:
            yield entry.name


def test_every_page_is_in_the_matrix():
    on_resolver = set(_page_names(get_resolver().url_patterns)) - NOT_PAGES
    listed = {route.name for route in PAGE_ROUTES}
    assert on_resolver - listed == set(), "pages missing from tests/pages/routes.py"
    assert listed - on_resolver == set(), "routes.py lists names the resolver does not have"


def test_every_route_has_a_denial_or_open_case():
    for route in PAGE_ROUTES:
        assert route.expect, f"{route.id} has no persona expectations"


def test_unnamed_page_urls_would_be_caught():
    # A page registered without a name is invisible to the check above; there must be none.
    def unnamed(patterns, prefix=""):
        for entry in patterns:
            route = prefix + str(entry.pattern)
            if route.startswith(SKIPPED_PREFIXES):
                continue
            if isinstance(entry, URLResolver):
                yield from unnamed(entry.url_patterns, route)
            elif not entry.name:
                yield route

    assert list(unnamed(get_resolver().url_patterns)) == []


def test_the_listed_names_reverse():
    assert reverse("review-queue") == "/review/"
    assert reverse("tenant-adapters", kwargs={"tenant": "acme"}) == "/t/acme/"
