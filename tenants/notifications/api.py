"""REST endpoints for a tenant's notifications and where they go.

GET    /api/v1/tenants/{t}/notifications/                   members  ?dismissed=true|false
POST   /api/v1/tenants/{t}/notifications/{id}/dismiss/      members  (for the caller only)
GET    /api/v1/tenants/{t}/email-recipients/                owners
POST   /api/v1/tenants/{t}/email-recipients/                owners  {email}
DELETE /api/v1/tenants/{t}/email-recipients/{email}/        owners
GET    /api/v1/tenants/{t}/webhooks/                        owners
POST   /api/v1/tenants/{t}/webhooks/                        owners  {name, url} -> secret, once
GET    /api/v1/tenants/{t}/webhooks/{name}/                 owners
PATCH  /api/v1/tenants/{t}/webhooks/{name}/                 owners  {url?, active?}
DELETE /api/v1/tenants/{t}/webhooks/{name}/                 owners
GET    /api/v1/tenants/{t}/webhooks/{name}/deliveries/      owners  every attempt and its answer
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from core.errors import ApplicationError
from tenants.api_base import TenantScopedViewSet
from tenants.notifications import selectors, services
from tenants.notifications.models import (
    Delivery,
    DeliveryAttempt,
    EmailRecipient,
    Notification,
    WebhookEndpoint,
)

MANAGE = services.MANAGE


class NotificationSerializer(serializers.ModelSerializer):
    dismissed = serializers.BooleanField(
        read_only=True,
        help_text="Whether the caller dismissed it: it no longer shows at the top of their pages.",
    )

    class Meta:
        model = Notification
        fields = ["id", "key", "subject", "body", "data", "created_at", "dismissed"]
        read_only_fields = fields


class EmailRecipientSerializer(serializers.ModelSerializer):
    class Meta:
        model = EmailRecipient
        fields = ["email", "created_at"]
        read_only_fields = ["created_at"]


class EmailRecipientCreateSerializer(serializers.Serializer):
    email = serializers.CharField(max_length=254)


class WebhookSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookEndpoint
        fields = ["name", "url", "active", "created_at"]
        read_only_fields = fields


class WebhookCreatedSerializer(WebhookSerializer):
    secret = serializers.CharField(read_only=True, help_text="Shown this once: keep it.")

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


class WebhookCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    url = serializers.CharField(max_length=2000)


class WebhookUpdateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=2000, required=False)
    active = serializers.BooleanField(required=False)


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "started_at", "duration_ms", "status_code", "ok", "error"]
        read_only_fields = fields


class DeliverySerializer(serializers.ModelSerializer):
    notification = serializers.CharField(source="notification.key", read_only=True)
    subject = serializers.CharField(source="notification.subject", read_only=True)
    attempt_log = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = [
            "id",
            "notification",
            "subject",
            "channel",
            "status",
            "attempts",
            "next_attempt_at",
            "delivered_at",
            "created_at",
            "attempt_log",
        ]
        read_only_fields = fields


DISMISSED_FILTER = {"true": True, "false": False}


class NotificationViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """What the tenant was told, newest first, each with whether the caller dismissed it; every
    member dismisses a notice for themselves (as the Dismiss button on the pages)."""

    schema_model = Notification
    serializer_class = NotificationSerializer
    lookup_url_kwarg = "notification"
    lookup_value_regex = r"[0-9]{1,18}"
    tenant_capabilities = {"list": "view", "dismiss": "view"}

    def get_queryset(self):
        raw = self.request.query_params.get("dismissed")
        if raw is not None and raw not in DISMISSED_FILTER:
            raise ApplicationError(
                "notification.invalid_filter", "`dismissed` must be `true` or `false`."
            )
        return selectors.notifications_seen_by(
            tenant=self.tenant,
            user=self.request.user,
            dismissed=None if raw is None else DISMISSED_FILTER[raw],
        )

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "dismissed",
                str,
                enum=list(DISMISSED_FILTER),
                description="Only those the caller dismissed (true) or not (false).",
            )
        ]
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=None, responses={200: NotificationSerializer})
    @action(detail=True, methods=["post"])
    def dismiss(self, request, tenant=None, notification=None):
        """Dismiss the notice for the caller: it leaves the top of their pages and stays listed
        (for everyone else, unchanged). Dismissing it again changes nothing."""
        found = selectors.notification_get(tenant=self.tenant, notification_id=notification or "")
        services.notice_dismiss(access=self.access, notification=found, request_id=self.request_id)
        shown = selectors.notifications_seen_by(tenant=self.tenant, user=request.user).get(
            pk=found.pk
        )
        return Response(NotificationSerializer(shown).data)


class EmailRecipientViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    """Who gets the tenant's notifications by e-mail; with none listed, its owners."""

    schema_model = EmailRecipient
    serializer_class = EmailRecipientSerializer
    lookup_field = "email"
    lookup_url_kwarg = "email"
    lookup_value_regex = r"[^/]{1,254}"
    tenant_capabilities = {"list": MANAGE, "create": MANAGE, "destroy": MANAGE}
    action_scopes = {"create": "admin", "destroy": "admin"}

    def get_queryset(self):
        return selectors.email_recipients_of(tenant=self.tenant)

    @extend_schema(
        request=EmailRecipientCreateSerializer, responses={201: EmailRecipientSerializer}
    )
    def create(self, request, tenant=None):
        data = EmailRecipientCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        recipient = services.email_recipient_add(
            access=self.access,
            tenant=self.tenant,
            email=data.validated_data["email"],
            request_id=self.request_id,
        )
        return Response(EmailRecipientSerializer(recipient).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, tenant=None, email=None):
        found = services.email_recipient_get(tenant=self.tenant, email=email or "")
        services.email_recipient_remove(
            access=self.access, recipient=found, request_id=self.request_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    schema_model = WebhookEndpoint
    serializer_class = WebhookSerializer
    lookup_field = "name"
    lookup_url_kwarg = "webhook"
    lookup_value_regex = r"[a-z0-9-]{1,40}"
    tenant_capabilities = {
        "list": MANAGE,
        "retrieve": MANAGE,
        "create": MANAGE,
        "partial_update": MANAGE,
        "destroy": MANAGE,
        "deliveries": MANAGE,
    }
    # Where the tenant's notifications go is tenant administration (a URL receives its data).
    action_scopes = {"create": "admin", "partial_update": "admin", "destroy": "admin"}

    def get_queryset(self):
        return selectors.webhooks_of(tenant=self.tenant)

    def retrieve(self, request, tenant=None, webhook=None):
        found = services.webhook_get(tenant=self.tenant, name=webhook or "")
        return Response(WebhookSerializer(found).data)

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookCreatedSerializer})
    def create(self, request, tenant=None):
        data = WebhookCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        hook, secret = services.webhook_create(
            access=self.access,
            tenant=self.tenant,
            request_id=self.request_id,
            **data.validated_data,
        )
        body = {**WebhookSerializer(hook).data, "secret": secret}
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(request=WebhookUpdateSerializer, responses={200: WebhookSerializer})
    def partial_update(self, request, tenant=None, webhook=None):
        data = WebhookUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        found = services.webhook_get(tenant=self.tenant, name=webhook or "")
        updated = services.webhook_update(
            access=self.access, hook=found, request_id=self.request_id, **data.validated_data
        )
        return Response(WebhookSerializer(updated).data)

    def destroy(self, request, tenant=None, webhook=None):
        found = services.webhook_get(tenant=self.tenant, name=webhook or "")
        services.webhook_delete(access=self.access, hook=found, request_id=self.request_id)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: DeliverySerializer(many=True)})
    @action(detail=True, methods=["get"])
    def deliveries(self, request, tenant=None, webhook=None):
        found = services.webhook_get(tenant=self.tenant, name=webhook or "")
        page = self.paginate_queryset(selectors.webhook_deliveries(hook=found))
        data = DeliverySerializer(page, many=True).data
        return self.get_paginated_response(data)
