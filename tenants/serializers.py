from __future__ import annotations

from django.contrib.auth import get_user_model
from rest_framework import serializers

from tenants.models import (
    ApiToken,
    Membership,
    PlatformRole,
    ServiceClass,
    Tenant,
    TenantRole,
    TokenScope,
)
from tenants.services.tenancy import TENANT_FIELDS

User = get_user_model()


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, style={"input_type": "password"})
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=TokenScope.values), min_length=1
    )
    tenant = serializers.SlugField(required=False, allow_null=True)
    expires_in_days = serializers.IntegerField(
        required=False, min_value=1, max_value=365, default=90
    )
    name = serializers.CharField(required=False, max_length=100, default="")


class TokenCreateSerializer(serializers.Serializer):
    scopes = serializers.ListField(
        child=serializers.ChoiceField(choices=TokenScope.values), min_length=1
    )
    expires_in_days = serializers.IntegerField(
        required=False, min_value=1, max_value=365, default=90
    )
    name = serializers.CharField(required=False, max_length=100, default="")


class ApiTokenSerializer(serializers.ModelSerializer):
    user = serializers.CharField(source="user.username", read_only=True)
    tenant = serializers.CharField(source="tenant.slug", read_only=True, default=None)
    active = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = [
            "prefix",
            "name",
            "user",
            "tenant",
            "scopes",
            "created_at",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "active",
            "service_class",
        ]
        read_only_fields = ["service_class"]

    def get_active(self, token: ApiToken) -> bool:
        return token.is_active()


class IssuedTokenSerializer(ApiTokenSerializer):
    token = serializers.CharField(help_text="Shown once; store it now.")

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", *ApiTokenSerializer.Meta.fields]


class TenantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tenant
        fields = ["slug", *TENANT_FIELDS, "created_at"]
        read_only_fields = ["created_at"]

    def to_representation(self, tenant: Tenant) -> dict:
        # A grant is only a grant: its holder learns the tenant's slug and name, not its plan.
        access = self.context.get("access")
        if access is not None and not access.sees_tenant_details(tenant):
            return {"slug": tenant.slug, "name": tenant.name}
        return super().to_representation(tenant)


class TenantUpdateSerializer(TenantSerializer):
    class Meta(TenantSerializer.Meta):
        read_only_fields = ["slug", "created_at"]


class MembershipSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")
    role = serializers.ChoiceField(choices=TenantRole.values)

    class Meta:
        model = Membership
        fields = ["username", "role", "created_at"]
        read_only_fields = ["created_at"]


class MembershipRoleSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=TenantRole.values)


class UserSerializer(serializers.ModelSerializer):
    platform_roles = serializers.SerializerMethodField()

    class Meta:
        model = User
        fields = ["username", "email", "is_active", "platform_roles", "date_joined", "last_login"]
        read_only_fields = fields

    def get_platform_roles(self, user) -> list[str]:
        return sorted(g.name for g in user.groups.all() if g.name in PlatformRole.values)


class MembershipBriefSerializer(serializers.Serializer):
    tenant = serializers.CharField()
    role = serializers.CharField()


class WhoAmISerializer(serializers.Serializer):
    """The caller as the portal sees it: for a token, also what the token itself may do."""

    username = serializers.CharField()
    platform_roles = serializers.ListField(child=serializers.CharField())
    memberships = MembershipBriefSerializer(many=True)
    token = ApiTokenSerializer(allow_null=True)


class UserCreateSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=256, write_only=True)
    email = serializers.EmailField(required=False, default="")
    platform_roles = serializers.ListField(
        child=serializers.ChoiceField(choices=PlatformRole.values), required=False, default=list
    )


class UserUpdateSerializer(serializers.Serializer):
    is_active = serializers.BooleanField(required=False)
    platform_roles = serializers.ListField(
        child=serializers.ChoiceField(choices=PlatformRole.values), required=False
    )


class TokenClassSerializer(serializers.Serializer):
    service_class = serializers.CharField(
        allow_blank=True,
        max_length=10,
        help_text="gold, silver or bronze, not above the tenant's class; empty: the tenant's own",
    )


class ServiceClassSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceClass
        fields = ["name", "weight", "max_queue_wait_ms", "sheddable", "updated_at"]
        read_only_fields = ["name", "updated_at"]


class ServiceClassUpdateSerializer(serializers.ModelSerializer):
    class Meta:
        model = ServiceClass
        fields = ["weight", "max_queue_wait_ms", "sheddable"]
