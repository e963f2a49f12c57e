"""The platform's rules hold in every overlay, and each check fails on a copy broken for it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.manifests import (
    OVERLAYS,
    containers,
    readme_settings,
    render,
    settings_direct_reads,
    settings_env_reads,
    settings_source,
)
from tests.deploy.rules import RULES

Objects = list[dict[str, Any]]


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_it_holds(overlay, rule):
    assert RULES[rule](render(overlay)) == []


def test_the_settings_list_comes_from_settings_py():
    reads = settings_env_reads()
    assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "PORTAL_ENGINE_KEYS"} <= set(reads)
    # Every variable README's settings table names is among them.
    assert readme_settings() - set(reads) == set()
    # A new reader call is on the list by itself, and a required one is told apart.
    added = settings_source() + '\nNEW_ONE = env_int("NEW_ONE", 3)\nNEW_TWO = env_str("NEW_TWO")\n'
    assert settings_env_reads(added) == {**reads, "NEW_ONE": True, "NEW_TWO": False}


def test_settings_py_reads_the_environment_only_through_env_py():
    assert settings_direct_reads() == []
    # Otherwise the list above would miss a setting: the check names such a read.
    for read in ('os.environ.get("OTHER")', 'os.getenv("OTHER")', "env_int(NAME, 1)"):
        found = settings_direct_reads(settings_source() + f"\nOTHER = {read}\n")
        assert found and read in found[-1], (read, found)


# --- each check fails when its rule is broken ----------------------------------------------


def _workload(objects: Objects, name: str) -> dict[str, Any]:
    return next(
        o for o in objects if o["kind"] in {"Deployment", "Job"} and o["metadata"]["name"] == name
    )


def _container(objects: Objects, name: str) -> dict[str, Any]:
    return _workload(objects, name)["spec"]["template"]["spec"]["containers"][0]


def _engine_pod(objects: Objects) -> dict[str, Any]:
    return next(
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].startswith("engine-")
    )


def _named(objects: Objects, kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def _policy(objects: Objects) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == "NetworkPolicy")


def no_secrets_for_web(objects: Objects) -> None:
    web = _container(objects, "web")
    web["envFrom"] = [s for s in web["envFrom"] if "secretRef" not in s]


def misspelt_setting(objects: Objects) -> None:
    _container(objects, "worker")["env"].append({"name": "CELERY_CONCURRENCE", "value": "4"})


def malformed_setting(objects: Objects) -> None:
    config = next(o for o in objects if o["kind"] == "ConfigMap")
    config["data"]["DATABASE_POOL_MAX"] = "many"


def policy_open_to_all(objects: Objects) -> None:
    _policy(objects)["spec"]["ingress"][0].pop("from")


def policy_removed(objects: Objects) -> None:
    objects.remove(_policy(objects))


def policy_admits_live(objects: Objects) -> None:
    live = _workload(objects, "live")["spec"]["template"]["metadata"]["labels"]
    live["lora-portal.io/engine-client"] = "true"


def policy_keeps_out_gateway(objects: Objects) -> None:
    for o in objects:
        if o["kind"] == "NetworkPolicy":
            o["spec"]["ingress"][0]["from"] = o["spec"]["ingress"][0]["from"][1:]


def two_beats(objects: Objects) -> None:
    _workload(objects, "beat")["spec"]["replicas"] = 2


def beat_rolls(objects: Objects) -> None:
    _workload(objects, "beat")["spec"]["strategy"] = {"type": "RollingUpdate"}


def root_user(objects: Objects) -> None:
    _container(objects, "live")["securityContext"]["runAsUser"] = 0


def root_allowed(objects: Objects) -> None:
    _workload(objects, "migrate")["spec"]["template"]["spec"]["securityContext"].pop("runAsNonRoot")


def no_requests(objects: Objects) -> None:
    _container(objects, "gateway")["resources"].pop("requests")


def engine_without_gpu(objects: Objects) -> None:
    engine = _engine_pod(objects)["spec"]["template"]["spec"]["containers"][0]
    engine["resources"]["requests"].pop("nvidia.com/gpu")


def worker_on_another_queue(objects: Objects) -> None:
    worker = _engine_pod(objects)["spec"]["template"]["spec"]["containers"][1]
    worker["env"][0]["value"] = "someone-else"


def key_of_another_engine(objects: Objects) -> None:
    engine = _engine_pod(objects)["spec"]["template"]["spec"]["containers"][0]
    key = next(e for e in engine["env"] if e["name"] == "VLLM_API_KEY")
    key["valueFrom"]["secretKeyRef"]["key"] = "someone-else"


def gateway_cap_too_small(objects: Objects) -> None:
    ingress = next(
        o for o in objects if o["kind"] == "Ingress" and o["metadata"]["name"] == "gateway"
    )
    ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] = "1m"


def upload_cap_far_above(objects: Objects) -> None:
    ingress = next(
        o for o in objects if o["kind"] == "Ingress" and o["metadata"]["name"] == "portal-uploads"
    )
    ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/proxy-body-size"] = "50g"


def web_ready_on_tcp(objects: Objects) -> None:
    _container(objects, "web")["readinessProbe"] = {"tcpSocket": {"port": "http"}}


def gateway_without_budget(objects: Objects) -> None:
    objects.remove(_named(objects, "PodDisruptionBudget", "gateway"))


def no_migrations_job(objects: Objects) -> None:
    objects.remove(_workload(objects, "migrate"))


def v1_to_web(objects: Objects) -> None:
    backend = _named(objects, "Ingress", "gateway")["spec"]["rules"][0]["http"]["paths"][0]
    backend["backend"]["service"]["name"] = "web"


def sockets_cut_at_60s(objects: Objects) -> None:
    annotations = _named(objects, "Ingress", "portal")["metadata"]["annotations"]
    annotations.pop("nginx.ingress.kubernetes.io/proxy-read-timeout")


def secret_in_manifests(objects: Objects) -> None:
    objects.append(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "portal-secrets"}, "data": {}}
    )


BREAKS: list[tuple[str, Callable[[Objects], None], str]] = [
    ("settings provided", no_secrets_for_web, "SECRET_KEY is required when DJANGO_DEBUG is off"),
    ("settings provided", misspelt_setting, "CELERY_CONCURRENCE is read by nothing"),
    ("settings provided", malformed_setting, "DATABASE_POOL_MAX='many' is not an integer"),
    ("engine ports policed", policy_open_to_all, "admits every source"),
    ("engine ports policed", policy_removed, "no NetworkPolicy selects the engine"),
    ("engine ports policed", policy_admits_live, "admits live"),
    ("engine ports policed", policy_keeps_out_gateway, "keep out gateway"),
    ("one beat", two_beats, "one replica"),
    ("one beat", beat_rolls, "Recreate"),
    ("non-root", root_user, "runs as user 0"),
    ("non-root", root_allowed, "runAsNonRoot is not set"),
    ("resource requests", no_requests, "gateway:gateway: no cpu request"),
    ("resource requests", engine_without_gpu, "requests no GPU"),
    ("engine nodes wired", worker_on_another_queue, "consumes the queue of someone-else"),
    ("engine nodes wired", key_of_another_engine, "VLLM_API_KEY is not entry"),
    ("ingress caps", gateway_cap_too_small, "Ingress gateway: body cap 1m"),
    ("ingress caps", upload_cap_far_above, "Ingress portal-uploads: body cap 50g"),
    ("no secret values", secret_in_manifests, "Secret portal-secrets carries values"),
    ("serving", web_ready_on_tcp, "web: its readiness probe is not /healthz"),
    ("serving", gateway_without_budget, "gateway: no PodDisruptionBudget covers it"),
    ("serving", no_migrations_job, "no Job runs the migrations"),
    ("serving", v1_to_web, "/v1/chat/completions: the Ingress does not send it to gateway"),
    ("serving", sockets_cut_at_60s, "/ws/fleet/metrics/: proxy-read-timeout 60 s cuts"),
]


@pytest.mark.parametrize(
    ("rule", "breaks", "expected"), BREAKS, ids=[f"{r}: {b.__name__}" for r, b, _ in BREAKS]
)
def test_the_check_fails_when_broken(rule, breaks, expected):
    objects = render("production")
    assert RULES[rule](objects) == []
    breaks(objects)
    problems = RULES[rule](objects)
    assert any(expected in problem for problem in problems), problems


def test_every_rule_has_a_breaking_case():
    assert {rule for rule, _, _ in BREAKS} == set(RULES)


def test_production_runs_several_web_and_gateway_replicas():
    objects = render("production")
    assert _workload(objects, "web")["spec"]["replicas"] >= 2
    # The gateway's replicas are the autoscaler's (the Deployment's own count would fight it).
    assert "replicas" not in _workload(objects, "gateway")["spec"]
    assert _named(objects, "HorizontalPodAutoscaler", "gateway")["spec"]["minReplicas"] >= 2


def test_every_portal_process_is_checked():
    roles = {c.role for c in containers(render("production")) if c.role}
    assert roles == {"web", "gateway", "worker", "engine-worker", "beat", "live", "migrate"}
