"""Every overlay renders with `kubectl kustomize`, and every object it renders validates against
the Kubernetes schemas (kubernetes-validate, offline, strict: unknown fields are errors)."""

from __future__ import annotations

import kubernetes_validate
import pytest

from tests.deploy.manifests import OVERLAYS, render

# The Kubernetes version the manifests are written for; kubernetes-validate ships its schemas.
KUBERNETES_VERSION = "1.32.0"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_it_renders(overlay):
    kinds = {obj["kind"] for obj in render(overlay)}
    assert {"Deployment", "Service", "NetworkPolicy", "Ingress", "Job", "ConfigMap"} <= kinds
    assert "PodDisruptionBudget" in kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_validates(overlay):
    errors = []
    for obj in render(overlay):
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert errors == []


def test_the_validator_refuses_a_broken_object():
    deployment = next(obj for obj in render("dev") if obj["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # misspelt field
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
