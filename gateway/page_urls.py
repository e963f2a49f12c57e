"""Page URLs the gateway owns: the tenant's playground."""

from django.urls import path

from gateway import pages

urlpatterns = [
    path("t/<slug:tenant>/playground/", pages.playground, name="tenant-playground"),
]
