"""Page URLs of budgets: a tenant's budgets page and the platform's."""

from django.urls import path

from budgets.pages import budgets as pages

urlpatterns = [
    path("t/<slug:tenant>/budgets/", pages.tenant_budgets, name="tenant-budgets"),
    path(
        "t/<slug:tenant>/budgets/<int:budget>/raise/",
        pages.raise_request_add,
        name="budget-raise-request-add",
    ),
    path("t/<slug:tenant>/budgets/set/", pages.budget_set, name="budget-set"),
    path("t/<slug:tenant>/budgets/<int:budget>/edit/", pages.budget_edit, name="budget-edit"),
    path("platform/budgets/", pages.platform_budgets, name="platform-budgets"),
    path("platform/budgets/price-cards/", pages.price_card_save, name="price-card-save"),
    path(
        "platform/budgets/raises/<int:raise_request>/decide/",
        pages.raise_request_decide,
        name="budget-raise-request-decide",
    ),
]
