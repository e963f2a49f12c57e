"""REST endpoints for auth tokens, users, tenants, members and tenant tokens."""

from __future__ import annotations

from django.contrib.auth import authenticate, get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.throttling import AnonRateThrottle
from rest_framework.views import APIView

from core.client_ip import client_ip
from core.errors import ApplicationError
from core.login_guard import locked_out_error
from tenants import serializers as s
from tenants.access_port import access_for_user
from tenants.api_base import PlatformViewSet, TenantScopedViewSet
from tenants.models import ApiToken, Membership, ServiceClass, Tenant
from tenants.selectors import tenant_tokens, whoami
from tenants.services.service_classes import service_class_update, token_class_set
from tenants.services.tenancy import (
    membership_remove,
    membership_set,
    tenant_create,
    tenant_update,
    user_create,
    user_update,
)
from tenants.services.tokens import token_issue, token_revoke

User = get_user_model()


class LoginThrottle(AnonRateThrottle):
    """Every attempt, failed or not; failures alone also count towards django-axes' lockout."""

    scope = "login"
    rate = "30/min"

    def get_ident(self, request):
        return client_ip(request)


class TokenObtainView(APIView):
    """Trade a username and password for a scoped API token (shown once)."""

    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes = [LoginThrottle]

    @extend_schema(request=s.TokenRequestSerializer, responses={201: s.IssuedTokenSerializer})
    def post(self, request):
        data = s.TokenRequestSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        v = data.validated_data
        user = authenticate(request, username=v["username"], password=v["password"])
        if user is None:
            if getattr(request, "axes_locked_out", False):
                raise locked_out_error()
            raise ApplicationError(
                "auth.invalid_credentials", "Wrong username or password.", status=401
            )
        access = access_for_user(user)
        tenant = access.get_tenant(v["tenant"]) if v.get("tenant") else None
        issued = token_issue(
            access=access,
            scopes=v["scopes"],
            tenant=tenant,
            name=v["name"],
            expires_in_days=v["expires_in_days"],
            request_id=request.request_id,
        )
        body = s.ApiTokenSerializer(issued.token).data
        return Response({"token": issued.plaintext, **body}, status=status.HTTP_201_CREATED)


class UserViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    schema_model = User
    serializer_class = s.UserSerializer
    lookup_field = "username"
    lookup_value_regex = r"[\w.@+-]+"
    platform_roles = {
        "list": ("is_platform_admin",),
        "retrieve": ("is_platform_admin",),
        "create": ("is_platform_admin",),
        "partial_update": ("is_platform_admin",),
        "me": (),
    }
    action_scopes = {"create": "admin", "partial_update": "admin"}

    def get_queryset(self):
        return User.objects.prefetch_related("groups").order_by("username")

    @extend_schema(responses={200: s.WhoAmISerializer})
    @action(detail=False, methods=["get"])
    def me(self, request):
        """Who the caller is (the CLI's `whoami`): any signed-in user, any read token."""
        return Response(s.WhoAmISerializer(whoami(access=self.access)).data)

    @extend_schema(request=s.UserCreateSerializer, responses={201: s.UserSerializer})
    def create(self, request):
        data = s.UserCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = user_create(
            access=self.access,
            roles=data.validated_data.pop("platform_roles"),
            request_id=self.request_id,
            **data.validated_data,
        )
        return Response(s.UserSerializer(user).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.UserUpdateSerializer, responses={200: s.UserSerializer})
    def partial_update(self, request, username=None):
        data = s.UserUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = user_update(
            access=self.access,
            user=self.get_object(),
            platform_roles=data.validated_data.get("platform_roles"),
            is_active=data.validated_data.get("is_active"),
            request_id=self.request_id,
        )
        return Response(
            s.UserSerializer(User.objects.prefetch_related("groups").get(pk=user.pk)).data
        )


class TenantViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    schema_model = Tenant
    serializer_class = s.TenantSerializer
    lookup_field = "slug"
    lookup_url_kwarg = "tenant"
    platform_roles = {
        "list": (),
        "retrieve": (),
        "create": ("is_platform_admin",),
        "partial_update": ("is_platform_admin",),
    }
    action_scopes = {"create": "admin", "partial_update": "admin"}
    filterset_fields = ["slo_class"]

    def get_queryset(self):
        if set(self.request.query_params) & set(self.filterset_fields):
            return self.access.tenants_with_details()
        return self.access.visible_tenants()

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "access": self.access}

    @extend_schema(request=s.TenantSerializer, responses={201: s.TenantSerializer})
    def create(self, request):
        data = s.TenantSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        tenant = tenant_create(
            access=self.access, request_id=self.request_id, **data.validated_data
        )
        return Response(s.TenantSerializer(tenant).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.TenantUpdateSerializer, responses={200: s.TenantSerializer})
    def partial_update(self, request, tenant=None):
        obj = self.get_object()
        data = s.TenantUpdateSerializer(obj, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        obj = tenant_update(
            access=self.access, tenant=obj, request_id=self.request_id, **data.validated_data
        )
        return Response(s.TenantSerializer(obj).data)


class MemberViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    schema_model = Membership
    serializer_class = s.MembershipSerializer
    lookup_field = "user__username"
    lookup_url_kwarg = "username"
    lookup_value_regex = r"[\w.@+-]+"
    tenant_capabilities = {
        "list": "view",
        "retrieve": "view",
        "create": "manage_members",
        "partial_update": "manage_members",
        "destroy": "manage_members",
    }
    # Who is in the tenant is the tenant's administration: a write token cannot change it.
    action_scopes = {"create": "admin", "partial_update": "admin", "destroy": "admin"}

    def get_queryset(self):
        return (
            Membership.objects.filter(tenant=self.tenant)
            .select_related("user")
            .order_by("user__username")
        )

    @extend_schema(request=s.MembershipSerializer, responses={201: s.MembershipSerializer})
    def create(self, request, tenant=None):
        data = s.MembershipSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = membership_set(
            access=self.access,
            tenant=self.tenant,
            username=data.validated_data["user"]["username"],
            role=data.validated_data["role"],
            request_id=self.request_id,
        )
        return Response(s.MembershipSerializer(membership).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=s.MembershipRoleSerializer, responses={200: s.MembershipSerializer})
    def partial_update(self, request, tenant=None, username=None):
        membership = self.get_object()
        data = s.MembershipRoleSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        membership = membership_set(
            access=self.access,
            tenant=self.tenant,
            username=membership.user.username,
            role=data.validated_data["role"],
            request_id=self.request_id,
        )
        return Response(s.MembershipSerializer(membership).data)

    def destroy(self, request, tenant=None, username=None):
        membership_remove(
            access=self.access, membership=self.get_object(), request_id=self.request_id
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class TenantTokenViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Tokens bound to this tenant: owners see all of them, everyone else only their own."""

    schema_model = ApiToken
    serializer_class = s.ApiTokenSerializer
    lookup_field = "prefix"
    tenant_capabilities = {
        "list": "view",
        "retrieve": "view",
        "create": "view",
        "destroy": "view",
        "partial_update": "view",
    }

    def get_queryset(self):
        return tenant_tokens(access=self.access, tenant=self.tenant)

    @extend_schema(request=s.TokenCreateSerializer, responses={201: s.IssuedTokenSerializer})
    def create(self, request, tenant=None):
        data = s.TokenCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        issued = token_issue(
            access=self.access,
            tenant=self.tenant,
            days_given="expires_in_days" in request.data,
            request_id=self.request_id,
            **data.validated_data,
        )
        return Response(
            {"token": issued.plaintext, **s.ApiTokenSerializer(issued.token).data},
            status=status.HTTP_201_CREATED,
        )

    @extend_schema(request=s.TokenClassSerializer, responses={200: s.ApiTokenSerializer})
    def partial_update(self, request, tenant=None, prefix=None):
        """Give the token a lower service class than its tenant's (or '' for the tenant's)."""
        data = s.TokenClassSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        token = token_class_set(
            access=self.access,
            token=self.get_object(),
            service_class=data.validated_data["service_class"],
            request_id=self.request_id,
        )
        return Response(s.ApiTokenSerializer(token).data)

    def destroy(self, request, tenant=None, prefix=None):
        token_revoke(access=self.access, token=self.get_object(), request_id=self.request_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServiceClassViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, PlatformViewSet):
    """Service classes as plans: every signed-in caller reads them, platform admins edit them."""

    schema_model = ServiceClass
    serializer_class = s.ServiceClassSerializer
    lookup_field = "name"
    platform_roles = {
        "list": (),
        "retrieve": (),
        "partial_update": ("is_platform_admin",),
    }
    action_scopes = {"partial_update": "admin"}

    def get_queryset(self):
        return ServiceClass.objects.all()

    @extend_schema(
        request=s.ServiceClassUpdateSerializer, responses={200: s.ServiceClassSerializer}
    )
    def partial_update(self, request, name=None):
        obj = self.get_object()
        data = s.ServiceClassUpdateSerializer(obj, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        obj = service_class_update(
            access=self.access,
            service_class=obj,
            request_id=self.request_id,
            **data.validated_data,
        )
        return Response(s.ServiceClassSerializer(obj).data)
