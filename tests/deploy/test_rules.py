"""The platform's rules hold in every overlay, and each check fails on a copy broken for it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.manifests import (
    OVERLAYS,
    containers,
    entrypoint_env_names,
    example_keys,
    examples,
    own_secret,
    readme_settings,
    render,
    secret_example,
    settings_direct_reads,
    settings_env_reads,
    settings_source,
)
from tests.deploy.rules import NEEDS, RULES, container_env, entrypoint_run, process

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
        if o["kind"] == "Deployment"
        and o["metadata"]["name"].startswith("engine-")
        and not o["metadata"]["name"].startswith("engine-worker-")
    )


def _worker_pod(objects: Objects) -> dict[str, Any]:
    """The engine worker's Deployment of the engine _engine_pod() finds."""
    engine = _engine_pod(objects)["metadata"]["name"].removeprefix("engine-")
    return _workload(objects, f"engine-worker-{engine}")


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
        if o["kind"] == "NetworkPolicy" and o["spec"].get("ingress"):
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
    worker = _worker_pod(objects)["spec"]["template"]["spec"]["containers"][0]
    worker["env"][0]["value"] = "someone-else"


def _engine_container(objects: Objects, name: str) -> dict[str, Any]:
    pod = (_worker_pod if name == "worker" else _engine_pod)(objects)["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == name)


def _from_own_secret(objects: Objects, container: str, key: str) -> None:
    """The engine node's `container` also gets `key` from the node's own Secret."""
    secret = f"{_engine_pod(objects)['metadata']['name']}-secrets"
    ref = {"secretKeyRef": {"name": secret, "key": key}}
    _engine_container(objects, container)["env"].append({"name": key, "valueFrom": ref})


def engine_worker_gets_secret_key(objects: Objects) -> None:
    _from_own_secret(objects, "worker", "SECRET_KEY")


def engine_worker_reads_web_secrets(objects: Objects) -> None:
    worker = _engine_container(objects, "worker")
    worker["envFrom"].append({"secretRef": {"name": "web-secrets"}})


def engine_gets_the_database(objects: Objects) -> None:
    _from_own_secret(objects, "engine", "DATABASE_URL")


def beat_gets_engine_keys(objects: Objects) -> None:
    beat = _container(objects, "beat")
    key = {"secretKeyRef": {"name": "beat-secrets", "key": "PORTAL_ENGINE_KEYS"}}
    beat["env"] = [{"name": "PORTAL_ENGINE_KEYS", "valueFrom": key}]


def gateway_shares_web_secrets(objects: Objects) -> None:
    for source in _container(objects, "gateway")["envFrom"]:
        if "secretRef" in source:
            source["secretRef"]["name"] = "web-secrets"


def redis_open(objects: Objects) -> None:
    objects.remove(_named(objects, "NetworkPolicy", "redis"))


def migrate_reaches_redis(objects: Objects) -> None:
    labels = _workload(objects, "migrate")["spec"]["template"]["metadata"]["labels"]
    labels["lora-portal.io/redis-client"] = "true"


def engine_worker_kept_from_postgresql(objects: Objects) -> None:
    labels = _worker_pod(objects)["spec"]["template"]["metadata"]["labels"]
    labels.pop("lora-portal.io/postgresql-client")


def engine_labelled_a_redis_client(objects: Objects) -> None:
    labels = _engine_pod(objects)["spec"]["template"]["metadata"]["labels"]
    labels["lora-portal.io/redis-client"] = "true"


def postgresql_open_to_an_address_range(objects: Objects) -> None:
    policy = _named(objects, "NetworkPolicy", "postgresql")
    policy["spec"]["ingress"][0]["from"].append({"ipBlock": {"cidr": "10.0.0.0/8"}})


def _engine_policy(objects: Objects) -> dict[str, Any]:
    name = _engine_pod(objects)["metadata"]["name"]
    return _named(objects, "NetworkPolicy", name)


def engine_egress_removed(objects: Objects) -> None:
    policy = _engine_policy(objects)
    policy["spec"]["policyTypes"] = ["Ingress"]
    policy["spec"].pop("egress")


def engine_reaches_the_internet(objects: Objects) -> None:
    _engine_policy(objects)["spec"]["egress"].append(
        {"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"protocol": "TCP", "port": 443}]}
    )


def engine_reaches_anywhere(objects: Objects) -> None:
    _engine_policy(objects)["spec"]["egress"].append({"ports": [{"protocol": "TCP", "port": 443}]})


def engine_worker_without_dns(objects: Objects) -> None:
    name = _worker_pod(objects)["metadata"]["name"]
    egress = _named(objects, "NetworkPolicy", name)["spec"]["egress"]
    egress[:] = [rule for rule in egress if "namespaceSelector" not in rule["to"][0]]


def engine_reaches_redis(objects: Objects) -> None:
    _engine_policy(objects)["spec"]["egress"].append(
        {
            "to": [{"podSelector": {"matchLabels": {"lora-portal.io/service": "redis"}}}],
            "ports": [{"protocol": "TCP", "port": 6379}],
        }
    )


def engine_reaches_an_address_range(objects: Objects) -> None:
    _engine_policy(objects)["spec"]["egress"].append({"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]})


def worker_back_in_the_engine_pod(objects: Objects) -> None:
    """As the engine node was: the worker a second container of the engine's pod."""
    worker = _worker_pod(objects)
    objects.remove(worker)
    engine = _engine_pod(objects)["spec"]["template"]["spec"]
    engine["containers"].append(worker["spec"]["template"]["spec"]["containers"][0])
    engine["volumes"].append({"name": "worker-tmp", "emptyDir": {}})


def worker_off_the_engine_node(objects: Objects) -> None:
    _worker_pod(objects)["spec"]["template"]["spec"].pop("affinity")


def adapters_in_the_worker_pod_only(objects: Objects) -> None:
    volumes = _worker_pod(objects)["spec"]["template"]["spec"]["volumes"]
    next(v for v in volumes if v["name"] == "adapters").pop("persistentVolumeClaim")
    next(v for v in volumes if v["name"] == "adapters")["emptyDir"] = {}


def engine_and_worker_share_tmp(objects: Objects) -> None:
    """One writable /tmp for both pods, on the node's disk."""
    for pod in (_engine_pod(objects), _worker_pod(objects)):
        for volume in pod["spec"]["template"]["spec"]["volumes"]:
            if volume["name"].endswith("-tmp"):
                volume.pop("emptyDir")
                volume["hostPath"] = {"path": "/var/tmp/lora-portal"}


def engine_writes_the_adapters(objects: Objects) -> None:
    pod = _engine_pod(objects)["spec"]["template"]["spec"]
    next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "adapters").pop("readOnly")
    next(v for v in pod["volumes"] if v["name"] == "adapters")["persistentVolumeClaim"].pop(
        "readOnly"
    )


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
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "web-secrets"}, "data": {}}
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
    ("engine nodes wired", key_of_another_engine, "VLLM_API_KEY is not ENGINE_KEY of"),
    ("engine nodes wired", engine_and_worker_share_tmp, "share the writable volume engine-tmp"),
    ("engine nodes wired", engine_writes_the_adapters, "share the writable volume adapters"),
    ("engine nodes wired", worker_back_in_the_engine_pod, "its worker shares the engine's pod"),
    ("engine nodes wired", worker_off_the_engine_node, "not required on the engine's node"),
    ("engine nodes wired", adapters_in_the_worker_pod_only, "do not share a node-local volume"),
    ("ingress caps", gateway_cap_too_small, "Ingress gateway: body cap 1m"),
    ("ingress caps", upload_cap_far_above, "Ingress portal-uploads: body cap 50g"),
    ("no secret values", secret_in_manifests, "Secret web-secrets carries values"),
    ("serving", web_ready_on_tcp, "web: its readiness probe is not /healthz"),
    ("serving", gateway_without_budget, "gateway: no PodDisruptionBudget covers it"),
    ("serving", no_migrations_job, "no Job runs the migrations"),
    ("serving", v1_to_web, "/v1/chat/completions: the Ingress does not send it to gateway"),
    ("serving", sockets_cut_at_60s, "/ws/fleet/metrics/: proxy-read-timeout 60 s cuts"),
    (
        "secrets by need",
        engine_worker_gets_secret_key,
        "worker: gets SECRET_KEY, which it does not",
    ),
    ("secrets by need", engine_worker_reads_web_secrets, "worker: reads Secret web-secrets, not"),
    (
        "secrets by need",
        engine_worker_reads_web_secrets,
        "gets EVIDENCE_SIGNING_KEY, which it does",
    ),
    ("secrets by need", engine_gets_the_database, "engine: gets DATABASE_URL, which it does not"),
    ("secrets by need", beat_gets_engine_keys, "beat: gets PORTAL_ENGINE_KEYS, which it does"),
    ("secrets by need", gateway_shares_web_secrets, "reads Secret web-secrets, not its own"),
    ("secrets by need", no_secrets_for_web, "web:web: lacks SECRET_KEY, which it uses"),
    ("data services policed", redis_open, "redis: no NetworkPolicy selects it"),
    ("data services policed", migrate_reaches_redis, "redis: admits migrate, which does not use"),
    (
        "data services policed",
        engine_worker_kept_from_postgresql,
        "postgresql: keeps out engine-worker-gpu-a",
    ),
    ("data services policed", engine_labelled_a_redis_client, "redis: admits engine-gpu-a, which"),
    ("data services policed", postgresql_open_to_an_address_range, "admits sources beyond"),
    ("engine egress", engine_egress_removed, "no egress NetworkPolicy"),
    ("engine egress", engine_reaches_the_internet, 'connect to {"ipBlock": {"cidr": "0.0.0.0/0"}}'),
    ("engine egress", engine_reaches_anywhere, "lets the pod connect anywhere"),
    ("engine egress", engine_worker_without_dns, "worker: its egress keeps out dns"),
    ("engine egress", engine_reaches_redis, "lets the pod connect to redis"),
    (
        "engine egress excludes data services",
        worker_back_in_the_engine_pod,
        "shares its pod with worker, which uses redis",
    ),
    ("engine egress excludes data services", engine_reaches_redis, "lets the engine reach redis"),
    (
        "engine egress excludes data services",
        engine_reaches_an_address_range,
        "lets the engine reach postgresql (any address)",
    ),
    (
        "engine egress excludes data services",
        engine_egress_removed,
        "no egress NetworkPolicy: the pod may connect anywhere, Redis and PostgreSQL included",
    ),
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


# --- secrets by need: the table, the examples and the entry point ---------------------------


def test_every_key_in_the_table_is_read():
    readable = set(settings_env_reads()) | entrypoint_env_names()
    for proc, needs in NEEDS.items():
        assert set(needs) - readable == set(), proc
    # The engine worker's key reaches the settings through the entry point only.
    assert "ENGINE_KEY" in entrypoint_env_names()


def test_each_example_secret_lists_what_its_workload_uses():
    used: dict[str, set[str]] = {}
    for overlay in OVERLAYS:
        for c in containers(render(overlay)):
            example = secret_example(own_secret(c.workload))
            assert example is not None, c.where()
            used.setdefault(example, set()).update(NEEDS[process(c) or ""])
    assert set(used) == set(examples())
    for example, keys in used.items():
        assert example_keys(example) == keys, example
    assert "EVIDENCE_SIGNING_KEY" in example_keys("web")
    engine_node = example_keys("engine-node")
    assert not engine_node & {"SECRET_KEY", "EVIDENCE_SIGNING_KEY", "PORTAL_ENGINE_KEYS"}


def _engine_worker(objects: Objects, engine: str):
    return next(
        c
        for c in containers(objects)
        if c.role == "engine-worker" and c.labels["lora-portal.io/engine"] == engine
    )


def test_the_engine_worker_starts_with_its_own_key_and_a_throwaway_secret_key():
    objects = render("production")
    env, problems = container_env(_engine_worker(objects, "gpu-a"), objects)
    assert problems == []
    assert list(json.loads(env["PORTAL_ENGINE_KEYS"])) == ["gpu-a"]
    assert "ENGINE_KEY" not in env
    assert len(env["SECRET_KEY"]) >= 50
    # Made at each start, known to no other process.
    given = tuple(sorted({**env, "ENGINE_KEY": "k" * 64}.items()))
    again = entrypoint_run.__wrapped__("engine-worker", given)
    assert again["SECRET_KEY"] != env["SECRET_KEY"]


def test_the_engine_worker_refuses_to_start_without_the_chain_key():
    objects = render("production")
    env, _ = container_env(_engine_worker(objects, "gpu-a"), objects)
    given = {**env, "ENGINE_KEY": "k" * 64}
    given.pop("AUDIT_CHAIN_KEY")
    with pytest.raises(RuntimeError, match="AUDIT_CHAIN_KEY is required"):
        entrypoint_run.__wrapped__("engine-worker", tuple(sorted(given.items())))
