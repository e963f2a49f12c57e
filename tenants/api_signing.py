"""REST endpoints for a tenant's signing keys and its signature policy.

GET    /api/v1/tenants/{t}/signing-keys/            members
POST   /api/v1/tenants/{t}/signing-keys/            owners   {name, public_key_pem}
GET    /api/v1/tenants/{t}/signing-keys/{name}/     members
DELETE /api/v1/tenants/{t}/signing-keys/{name}/     owners   (revokes; the row stays)
GET    /api/v1/tenants/{t}/signature-policy/        members
PUT    /api/v1/tenants/{t}/signature-policy/        owners   {require_signatures}
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.response import Response

from tenants.api_base import TenantScopedViewSet
from tenants.models import SigningKey
from tenants.services import signing_keys as service


class SigningKeySerializer(serializers.ModelSerializer):
    algorithm = serializers.SerializerMethodField()
    fingerprint = serializers.SerializerMethodField()
    created_by = serializers.CharField(source="created_by.username", default=None, read_only=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = SigningKey
        fields = [
            "name",
            "algorithm",
            "fingerprint",
            "public_key_pem",
            "created_by",
            "created_at",
            "revoked_at",
            "active",
        ]
        read_only_fields = fields

    def get_algorithm(self, key: SigningKey) -> str:
        return service.key_algorithm(key)

    def get_fingerprint(self, key: SigningKey) -> str:
        return service.key_fingerprint(key.public_key_pem)

    def get_active(self, key: SigningKey) -> bool:
        return key.revoked_at is None


class SigningKeyCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=40)
    public_key_pem = serializers.CharField(max_length=service.MAX_PEM_CHARS, trim_whitespace=False)


class SignaturePolicySerializer(serializers.Serializer):
    require_signatures = serializers.BooleanField()
    active_keys = serializers.IntegerField(read_only=True)


class SigningKeyViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    schema_model = SigningKey
    serializer_class = SigningKeySerializer
    lookup_field = "name"
    lookup_url_kwarg = "key"
    lookup_value_regex = r"[a-z0-9-]{1,40}"
    tenant_capabilities = {
        "list": "view",
        "retrieve": "view",
        "create": "manage_keys",
        "destroy": "manage_keys",
    }
    # Which keys a tenant trusts decides which uploads count as signed: tenant administration.
    action_scopes = {"create": "admin", "destroy": "admin"}

    def get_queryset(self):
        return service.signing_keys_of(tenant=self.tenant)

    def retrieve(self, request, tenant=None, key=None):
        return Response(
            SigningKeySerializer(service.signing_key_get(tenant=self.tenant, name=key)).data
        )

    @extend_schema(request=SigningKeyCreateSerializer, responses={201: SigningKeySerializer})
    def create(self, request, tenant=None):
        data = SigningKeyCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        key = service.signing_key_add(
            access=self.access,
            tenant=self.tenant,
            request_id=self.request_id,
            **data.validated_data,
        )
        return Response(SigningKeySerializer(key).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, tenant=None, key=None):
        found = service.signing_key_get(tenant=self.tenant, name=key)
        service.signing_key_revoke(access=self.access, key=found, request_id=self.request_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SignaturePolicyViewSet(TenantScopedViewSet):
    """Whether uploads to the tenant must carry a signature by one of its active keys."""

    serializer_class = SignaturePolicySerializer
    tenant_capabilities = {"retrieve": "view", "update": "manage_keys"}
    action_scopes = {"update": "admin"}

    @extend_schema(responses={200: SignaturePolicySerializer})
    def retrieve(self, request, tenant=None):
        return Response(service.signature_policy(tenant=self.tenant))

    @extend_schema(request=SignaturePolicySerializer, responses={200: SignaturePolicySerializer})
    def update(self, request, tenant=None):
        data = SignaturePolicySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        updated = service.signature_policy_set(
            access=self.access,
            tenant=self.tenant,
            request_id=self.request_id,
            require_signatures=data.validated_data["require_signatures"],
        )
        return Response(service.signature_policy(tenant=updated))
