"""Edits made in the Django admin (users, groups, beat schedules, anything else registered there)
go into the audit chain, inside the admin's own transaction, like every other change.

The admin writes a LogEntry for each add, change and delete of one object; a bulk "delete
selected" writes its LogEntries with bulk_create (no post_save), so that action is replaced by
one that audits each deleted object itself.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.actions import delete_selected
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.signals import post_save
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy

from core.audit import record_event

_ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def _object_type(content_type) -> str:
    return f"{content_type.app_label}.{content_type.model}" if content_type else ""


def audit_log_entry(sender, instance: LogEntry, created: bool, **kwargs) -> None:
    if not created:
        return
    record_event(
        action=_ACTIONS.get(instance.action_flag, "admin.change"),
        actor=instance.user,
        object_type=_object_type(instance.content_type),
        object_id=instance.object_id or "",
        after={"object": instance.object_repr, "change": instance.get_change_message()},
    )


# Django's own action's permission and wording (same msgid, so its translations still apply).
@admin.action(
    permissions=["delete"],
    description=gettext_lazy("Delete selected %(verbose_name_plural)s"),
)
def audited_delete_selected(
    modeladmin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
) -> TemplateResponse | None:
    confirmed = bool(request.POST.get("post"))
    doomed = [(str(obj.pk), str(obj)[:200]) for obj in queryset] if confirmed else []
    with transaction.atomic():
        response = delete_selected(modeladmin, request, queryset)
        # None: deleted. A single object's LogEntry is saved alone, so audit_log_entry has it.
        if response is None and len(doomed) > 1:
            object_type = f"{queryset.model._meta.app_label}.{queryset.model._meta.model_name}"
            for object_id, label in doomed:
                record_event(
                    action="admin.delete",
                    actor=request.user,
                    object_type=object_type,
                    object_id=object_id,
                    after={"object": label, "change": "Deleted (bulk action)."},
                    request_id=getattr(request, "request_id", ""),
                )
    return response


def connect() -> None:
    post_save.connect(audit_log_entry, sender=LogEntry, dispatch_uid="portal.admin_audit")
    admin.site.add_action(audited_delete_selected, "delete_selected")
