"""Shared REST plumbing: error shape, pagination, the tenant-scoped base viewset."""
