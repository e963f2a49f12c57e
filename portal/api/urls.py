"""Every REST resource under /api/v1/."""

from django.urls import path

urlpatterns: list = []
