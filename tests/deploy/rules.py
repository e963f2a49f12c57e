"""The platform's rules over rendered manifests. Each check returns its violations (empty: the
rule holds), so a test can show a check failing on a broken copy of the objects."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.deploy.manifests import (
    ENGINE_IMAGE,
    ENGINE_LABEL,
    PORTAL_IMAGE,
    REPO,
    Container,
    config_maps,
    containers,
    entrypoint_env_names,
    image_env,
    own_secret,
    pod_template,
    secret_keys,
    settings_env_reads,
    workloads,
)

Objects = list[dict[str, Any]]
COMPONENT = "app.kubernetes.io/component"
ENGINE_WORKER = "engine-worker"
# Who may call an engine (README: workers and the gateway; web is the same ASGI app and probes
# engines for /healthz): components, plus the engine's own worker (its own pod on that node).
ENGINE_CLIENTS = {"gateway", "web", "worker"}
# Placeholders for the Secrets' values, which are not in the manifests: shaped like real ones,
# with the password and TLS that production requires of PostgreSQL and Redis (docs/deploy.md 1).
SAMPLE_SECRET_VALUES = {
    "DATABASE_URL": "postgres://portal:placeholder@db.invalid:5432/portal?sslmode=verify-full",
    "REDIS_URL": "rediss://:placeholder@redis.invalid:6379/0",
    "S3_ACCESS_KEY_ID": "",
    "S3_SECRET_ACCESS_KEY": "",
}
SERVICE_LABEL = "lora-portal.io/service"
# Which secret keys each process uses, and why: a container may get these and no others from its
# Secret (check_secrets_by_need). test_rules.py checks that every name is a variable the portal's
# settings or the entry point read, and that each example Secret lists exactly what its workload's
# containers use. Engine: the vLLM container of an engine node; engine-worker: the Celery worker
# beside it (queue engine.<name>).
NEEDS: dict[str, dict[str, str]] = {
    "web": {
        "SECRET_KEY": "sessions, CSRF and signed values (Django)",
        "AUDIT_CHAIN_KEY": "its audited writes extend the chain (core/audit.py)",
        "EVIDENCE_SIGNING_KEY": "signs compliance records (portal/evidence.py, API and pages)",
        "DATABASE_URL": "every page and API call",
        "REDIS_URL": "cache, channel layer, limits, Celery's broker",
        "PORTAL_ENGINE_KEYS": "/healthz probes engines; the playground streams from them",
        "S3_ACCESS_KEY_ID": "uploads go to quarantine/, direct uploads are presigned",
        "S3_SECRET_ACCESS_KEY": "as S3_ACCESS_KEY_ID",
    },
    "gateway": {
        "SECRET_KEY": "the cache salt and conversation ids (gateway/routes.py, conversations.py)",
        # Not for /v1/ itself: the pod runs the whole ASGI app, and an audited write there with the
        # key missing would extend the chain with a key derived from SECRET_KEY (a broken chain,
        # not a refusal).
        "AUDIT_CHAIN_KEY": "the whole ASGI app runs here (portal/asgi.py)",
        "DATABASE_URL": "tokens, plans, aliases",
        "REDIS_URL": "admission, limits, the fleet's shared state",
        "PORTAL_ENGINE_KEYS": "every /v1/ request goes to an engine",
    },
    "worker": {
        "SECRET_KEY": "required by portal/settings.py at start (DJANGO_DEBUG=0)",
        "AUDIT_CHAIN_KEY": "validation, promotion and the sweeps audit their changes",
        "DATABASE_URL": "every task",
        "REDIS_URL": "Celery's broker, the fleet's shared state",
        "PORTAL_ENGINE_KEYS": "probe_engines calls every engine's health route",
        "S3_ACCESS_KEY_ID": "validation reads quarantine/, promotion writes serving/, checkpoints audit/",
        "S3_SECRET_ACCESS_KEY": "as S3_ACCESS_KEY_ID",
    },
    "beat": {
        "SECRET_KEY": "required by portal/settings.py at start (DJANGO_DEBUG=0)",
        "DATABASE_URL": "django-celery-beat's DatabaseScheduler",
        "REDIS_URL": "Celery's broker",
    },
    "live": {
        "SECRET_KEY": "required by portal/settings.py at start (DJANGO_DEBUG=0)",
        "DATABASE_URL": "evictions per second (FleetAction), socket access checks",
        "REDIS_URL": "the gateway's per-second series, the channel layer",
    },
    "migrate": {
        "SECRET_KEY": "required by portal/settings.py at start (DJANGO_DEBUG=0)",
        "AUDIT_CHAIN_KEY": "portal migration 0003 re-keys the audit chain",
        "DATABASE_URL": "the migrations",
    },
    "engine-worker": {
        "ENGINE_KEY": "its own engine's key (deploy/entrypoint.sh makes it PORTAL_ENGINE_KEYS)",
        "REDIS_URL": "Celery's broker, the engine's lock and pinned set (workers/controller.py)",
        # The node tasks read and write the fleet's rows: Engine, AdapterVersion (manifest,
        # serving keys), Residency, FleetAction, alarms (workers/controller.py, reconcile.py,
        # node_copies.py), and record_event() computes the chain HMAC as it inserts.
        "DATABASE_URL": "converge and stage read and write the fleet's rows",
        "AUDIT_CHAIN_KEY": "engine state changes and quarantine alarms are audited there",
        "S3_ACCESS_KEY_ID": "staging downloads serving/ files (credentials that only read it)",
        "S3_SECRET_ACCESS_KEY": "as S3_ACCESS_KEY_ID",
    },
    "engine": {"ENGINE_KEY": "PORTAL_ENGINE_KEY and VLLM_API_KEY: the plugin's and vLLM's guard"},
}
# The data services and the key that says a process uses one.
DATA_SERVICES = {"redis": ("REDIS_URL", 6379), "postgresql": ("DATABASE_URL", 5432)}
# Where an engine node's pod may connect: the cluster's DNS, the object store, the data services
# its worker uses, and itself (its worker calls the engine through its Service).
DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
OBJECT_STORE = "object-store"
# How long the proxy keeps an idle websocket (a tenant's events socket between two events).
WEBSOCKET_TIMEOUT_S = 3600
# Read by Django and Celery themselves, not by portal/settings.py.
FRAMEWORK_ENV = {"DJANGO_SETTINGS_MODULE"}


def engine_names(objects: Objects) -> list[str]:
    return sorted(
        {
            c.labels.get(ENGINE_LABEL, "")
            for c in containers(objects)
            if c.image_name == ENGINE_IMAGE
        }
    )


def _placeholder(name: str) -> str:
    # The same for the same name, so identical environments are checked once (_deploy_check).
    return hashlib.sha256(f"placeholder {name}".encode()).hexdigest()


def process(c: Container) -> str | None:
    """The process a container runs: its portal role, or "engine" for an engine's vLLM."""
    return c.role or ("engine" if c.image_name == ENGINE_IMAGE else None)


def _secret_value(key: str, objects: Objects, c: Container) -> str:
    if key == "PORTAL_ENGINE_KEYS":
        return json.dumps({engine: _placeholder(engine) for engine in engine_names(objects)})
    if key == "ENGINE_KEY":
        return _placeholder(c.labels.get(ENGINE_LABEL, ""))
    return SAMPLE_SECRET_VALUES.get(key, _placeholder(key))


def secrets_given(c: Container) -> tuple[dict[str, str], list[str]]:
    """The secret keys a container gets (key -> the Secret it comes from), and what is wrong with
    its references (a Secret no example describes, a key not in it)."""
    given: dict[str, str] = {}
    problems: list[str] = []
    for source in c.spec.get("envFrom") or []:
        if "secretRef" in source:
            name = source["secretRef"]["name"]
            keys = secret_keys(name)
            if keys is None:
                problems.append(
                    f"{c.where()}: envFrom names Secret {name}, which no example describes"
                )
                continue
            given.update(dict.fromkeys(keys, name))
    for item in c.spec.get("env") or []:
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            keys = secret_keys(ref["name"])
            if keys is None or ref["key"] not in keys:
                problems.append(
                    f"{c.where()}: {item['name']} names key {ref['key']} of Secret {ref['name']}, "
                    "which its example does not list"
                )
            given[ref["key"]] = ref["name"]
    return given, problems


def given_env(c: Container, objects: Objects) -> tuple[dict[str, str], list[str]]:
    """The environment a portal container is given (image ENV, then envFrom, then env), with
    placeholders for secret values; and what is wrong with its references."""
    env = dict(image_env())
    maps = config_maps(objects)
    _, problems = secrets_given(c)
    for source in c.spec.get("envFrom") or []:
        if "configMapRef" in source:
            name = source["configMapRef"]["name"]
            if name not in maps:
                problems.append(
                    f"{c.where()}: envFrom names ConfigMap {name}, which is not rendered"
                )
            env.update(maps.get(name, {}))
        elif "secretRef" in source:
            keys = secret_keys(source["secretRef"]["name"]) or frozenset()
            env.update({key: _secret_value(key, objects, c) for key in keys})
    for item in c.spec.get("env") or []:
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            env[item["name"]] = _secret_value(ref["key"], objects, c)
        else:
            env[item["name"]] = str(item.get("value", ""))
    return env, problems


# The entry point's processes that it starts with `exec celery` or `exec uvicorn`: run with those
# two replaced by a stand-in that prints its environment, it shows what the process gets.
_EXEC_STANDIN = "#!{python}\nimport json, os\nprint(json.dumps(dict(os.environ)))\n"
_STANDIN_ROLES = {"web", "gateway", "worker", "engine-worker", "beat"}
# What the shell and the stand-in add themselves (Python sets LC_CTYPE in a C locale, PEP 538).
_HARNESS_ENV = {"PATH", "PWD", "SHLVL", "_", "OLDPWD", "LC_CTYPE"}


@functools.cache
def entrypoint_run(role: str, env_items: tuple[tuple[str, str], ...]) -> dict[str, str]:
    env = dict(env_items)
    with tempfile.TemporaryDirectory() as bin_dir:
        for command in ("celery", "uvicorn"):
            standin = Path(bin_dir) / command
            standin.write_text(_EXEC_STANDIN.format(python=sys.executable))
            standin.chmod(0o755)
        run_env = {**env, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"}
        result = subprocess.run(
            ["sh", str(REPO / "deploy" / "entrypoint.sh"), role],
            env=run_env,
            capture_output=True,
            text=True,
            # A bound on a hung shell, not a wait: under a full suite's load (engines starting
            # beside four deploy checks) even this stand-in's start took over 60 s once.
            timeout=300,
        )
    if result.returncode != 0:
        raise RuntimeError(f"entrypoint.sh {role}: {result.stderr.strip()}")
    printed = json.loads(result.stdout)
    started = {k: v for k, v in printed.items() if k in env or k not in _HARNESS_ENV}
    if "PATH" in env:
        started["PATH"] = env["PATH"]
    return started


def container_env(c: Container, objects: Objects) -> tuple[dict[str, str], list[str]]:
    """The environment a portal container's process starts with: what it is given, as
    deploy/entrypoint.sh passes it on (it builds an engine worker's PORTAL_ENGINE_KEYS and
    SECRET_KEY); and what is wrong with its references or its start."""
    env, problems = given_env(c, objects)
    if c.role not in _STANDIN_ROLES:
        return env, problems
    try:
        return entrypoint_run(c.role, tuple(sorted(env.items()))), problems
    except RuntimeError as exc:
        return env, [*problems, f"{c.where()}: {exc}"]


_DEPLOY_CHECK = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
from portal.body_limits import body_cap
settings.SILENCED_SYSTEM_CHECKS = [*settings.SILENCED_SYSTEM_CHECKS, *json.loads(os.environ["CHECKS_NOT_MINE"])]
del os.environ["CHECKS_NOT_MINE"]
call_command("check", deploy=True, verbosity=0)
print(json.dumps({
    "request": body_cap("application/json"),
    "upload": body_cap("multipart/form-data"),
    "gateway": settings.GATEWAY_MAX_BODY_BYTES,
}))
"""


@functools.cache
def _deploy_check(
    env_items: tuple[tuple[str, str], ...], not_mine: tuple[str, ...] = ()
) -> tuple[bool, str]:
    env = dict(env_items)
    env["CHECKS_NOT_MINE"] = json.dumps(not_mine)
    # The placeholder database does not exist: a check that asks it (workers.E005) waits the pool's
    # timeout, 1 s here unless the container sets its own.
    env.setdefault("DATABASE_POOL_TIMEOUT", "1")
    with tempfile.TemporaryDirectory() as var_dir:
        # The image's /app/var (PORTAL_VAR_DIR) does not exist on this machine.
        env["PORTAL_VAR_DIR"] = var_dir
        env["PATH"] = os.environ.get("PATH", "")
        result = subprocess.run(
            [sys.executable, "-c", _DEPLOY_CHECK],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    if result.returncode != 0:
        return False, (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    return True, result.stdout.strip().splitlines()[-1]


# The deploy checks about a secret, silenced for a process that does not hold it by need (beat has
# no engine keys, so "PORTAL_ENGINE_KEYS is empty" is not its error).
CHECKS_OF_SECRET = {
    "PORTAL_ENGINE_KEYS": ("workers.E002", "workers.E005"),
    "AUDIT_CHAIN_KEY": ("portal.W001",),
    # W002 while the key may be derived from SECRET_KEY, E002 once it is required outside debug.
    "EVIDENCE_SIGNING_KEY": ("portal.E002", "portal.W002"),
}


def needed_settings(c: Container) -> set[str]:
    """The secret settings a process holds by need (an engine worker's ENGINE_KEY reaches the
    settings as PORTAL_ENGINE_KEYS, deploy/entrypoint.sh)."""
    needs = set(NEEDS.get(process(c) or "", {}))
    return needs | ({"PORTAL_ENGINE_KEYS"} if "ENGINE_KEY" in needs else set())


def checks_not_mine(c: Container) -> tuple[str, ...]:
    held = needed_settings(c)
    return tuple(sorted(i for key, ids in CHECKS_OF_SECRET.items() if key not in held for i in ids))


def portal_settings(c: Container, objects: Objects) -> tuple[dict[str, int] | None, str]:
    """The portal's body caps as this container's settings give them, after `manage.py check
    --deploy` passed in its environment; None and the error when it did not."""
    env, _ = container_env(c, objects)
    # Only what the settings read: the entry point's own variables (queue, concurrency) do not
    # change them, so most containers share one check.
    reads = settings_env_reads()
    settings_env = {k: v for k, v in env.items() if k in reads or k in FRAMEWORK_ENV}
    ok, output = _deploy_check(tuple(sorted(settings_env.items())), checks_not_mine(c))
    return (json.loads(output), "") if ok else (None, output)


# --- the rules ------------------------------------------------------------------------------


def check_settings_provided(objects: Objects) -> list[str]:
    """Every setting the portal reads is provided or defaulted, no unknown name is given, and the
    portal starts and passes `manage.py check --deploy` with what each container gets."""
    reads = settings_env_reads()
    known = set(reads) | set(image_env()) | entrypoint_env_names() | FRAMEWORK_ENV
    problems: list[str] = []
    portal = [c for c in containers(objects) if c.image_name == PORTAL_IMAGE]
    # Each distinct environment's check runs once (cached); start them side by side.
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda c: portal_settings(c, objects), portal))
    for c in portal:
        env, ref_problems = container_env(c, objects)
        problems += ref_problems
        missing = sorted(
            name for name, defaulted in reads.items() if not defaulted and name not in env
        )
        problems += [f"{c.where()}: {name} is required and not provided" for name in missing]
        given, _ = given_env(c, objects)
        unknown = sorted((set(env) | set(given)) - known)
        problems += [f"{c.where()}: {name} is read by nothing in the portal" for name in unknown]
        caps, error = portal_settings(c, objects)
        if caps is None:
            problems.append(f"{c.where()}: manage.py check --deploy fails: {error}")
    return problems


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _is_worker_of(pod_labels: dict[str, str], engine_labels: dict[str, str]) -> bool:
    """Whether a pod with these labels is the engine worker of the engine with those."""
    return pod_labels.get(COMPONENT) == ENGINE_WORKER and pod_labels.get(
        ENGINE_LABEL
    ) == engine_labels.get(ENGINE_LABEL)


def check_engine_ports_policed(objects: Objects) -> list[str]:
    """Each engine port is reachable only from the gateway, web, the shared workers and the
    engine's own worker's pod, through NetworkPolicies that select the engine's pod, and the
    gateway and the engine's own worker can reach it."""
    policies = [obj for obj in objects if obj.get("kind") == "NetworkPolicy"]
    pods = [
        (w["metadata"]["name"], pod_template(w)["metadata"].get("labels", {}))
        for w in workloads(objects)
    ]
    problems: list[str] = []
    for c in containers(objects, init=False):
        if c.image_name != ENGINE_IMAGE:
            continue
        labels = c.labels
        ports = {p["containerPort"] for p in c.spec.get("ports") or []}
        ports |= {p["name"] for p in c.spec.get("ports") or [] if "name" in p}
        selecting = [
            np
            for np in policies
            if _selects(np["spec"].get("podSelector") or {}, labels)
            and "Ingress" in np["spec"].get("policyTypes", ["Ingress"])
        ]
        if not selecting:
            problems.append(f"{c.where()}: no NetworkPolicy selects the engine: its port is open")
            continue
        reaches: set[str] = set()
        for np in selecting:
            for rule in np["spec"].get("ingress") or []:
                rule_ports = {p.get("port") for p in rule.get("ports") or []}
                if rule_ports and not rule_ports & ports:
                    continue
                peers = rule.get("from")
                if not peers:
                    problems.append(f"{c.where()}: {np['metadata']['name']} admits every source")
                    continue
                for peer in peers:
                    if (
                        "ipBlock" in peer
                        or "namespaceSelector" in peer
                        or "podSelector" not in peer
                    ):
                        problems.append(
                            f"{c.where()}: {np['metadata']['name']} admits sources beyond the "
                            "portal's pods"
                        )
                        continue
                    for name, pod_labels in pods:
                        if not _selects(peer["podSelector"], pod_labels):
                            continue
                        component = pod_labels.get(COMPONENT, "")
                        if _is_worker_of(pod_labels, labels):
                            reaches.add("its worker")
                        elif component in ENGINE_CLIENTS:
                            reaches.add(component)
                        else:
                            problems.append(
                                f"{c.where()}: {np['metadata']['name']} admits {name} ({component})"
                            )
        for needed in ("gateway", "its worker"):
            if needed not in reaches:
                problems.append(f"{c.where()}: the NetworkPolicies keep out {needed}")
    return problems


def check_one_beat(objects: Objects) -> list[str]:
    """Exactly one beat process: one workload, one replica, never two during a rollout."""
    beats = [c for c in containers(objects) if c.role == "beat"]
    if len(beats) != 1:
        return [f"{len(beats)} beat containers (every beat sends every schedule entry)"]
    workload = beats[0].workload
    problems = []
    if workload["kind"] != "Deployment" or workload["spec"].get("replicas", 1) != 1:
        problems.append(f"{beats[0].where()}: beat must be a Deployment of one replica")
    if (workload["spec"].get("strategy") or {}).get("type") != "Recreate":
        problems.append(f"{beats[0].where()}: beat needs strategy Recreate (a rollout runs two)")
    for obj in objects:
        if obj.get("kind") == "HorizontalPodAutoscaler":
            target = obj["spec"]["scaleTargetRef"]
            if target["name"] == workload["metadata"]["name"]:
                problems.append(f"{beats[0].where()}: an autoscaler scales beat")
    return problems


def check_non_root(objects: Objects) -> list[str]:
    problems = []
    for c in containers(objects):
        pod_ctx = c.pod.get("securityContext") or {}
        ctx = c.spec.get("securityContext") or {}
        if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            problems.append(f"{c.where()}: runAsNonRoot is not set")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{c.where()}: runs as user 0")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{c.where()}: allowPrivilegeEscalation is not false")
        if ctx.get("privileged"):
            problems.append(f"{c.where()}: privileged")
    return problems


def check_resource_requests(objects: Objects) -> list[str]:
    """CPU and memory requests on every container; engines request their GPU (requests equal to
    limits, as Kubernetes requires for extended resources)."""
    problems = []
    for c in containers(objects):
        resources = c.spec.get("resources") or {}
        requests = resources.get("requests") or {}
        for resource in ("cpu", "memory"):
            if resource not in requests:
                problems.append(f"{c.where()}: no {resource} request")
        if c.image_name == ENGINE_IMAGE:
            gpus = requests.get("nvidia.com/gpu")
            if not gpus or (resources.get("limits") or {}).get("nvidia.com/gpu") != gpus:
                problems.append(f"{c.where()}: the engine requests no GPU (or limits differ)")
    return problems


def _engine_workers(objects: Objects, engine: Container) -> list[Container]:
    """The engine workers of an engine: `engine-worker` containers with its engine label."""
    name = engine.labels.get(ENGINE_LABEL)
    return [
        c
        for c in containers(objects, init=False)
        if c.role == ENGINE_WORKER and c.labels.get(ENGINE_LABEL) == name
    ]


def _volume_source(objects: Objects, c: Container, volume: str) -> tuple[str, str] | None:
    """Where a pod's volume lives on a node, as ("local", PV name) or ("hostPath", path); None
    for anything else (an emptyDir is the pod's own; a network volume is on no one node)."""
    spec = next((v for v in c.pod.get("volumes") or [] if v["name"] == volume), None)
    if spec is None:
        return None
    if "hostPath" in spec:
        return ("hostPath", spec["hostPath"]["path"].rstrip("/"))
    claim_name = (spec.get("persistentVolumeClaim") or {}).get("claimName")
    claim = next(
        (
            o
            for o in objects
            if o.get("kind") == "PersistentVolumeClaim" and o["metadata"]["name"] == claim_name
        ),
        None,
    )
    pv_name = (claim or {}).get("spec", {}).get("volumeName")
    pv = next(
        (
            o
            for o in objects
            if o.get("kind") == "PersistentVolume" and o["metadata"]["name"] == pv_name
        ),
        None,
    )
    if pv is not None and "local" in pv["spec"]:
        return ("local", pv_name or "")
    return None


def _volume_read_only(c: Container, volume: str) -> bool:
    spec: dict[str, Any] = next((v for v in c.pod.get("volumes") or [] if v["name"] == volume), {})
    mount: dict[str, Any] = next(
        (m for m in c.spec.get("volumeMounts") or [] if m["name"] == volume), {}
    )
    return bool(mount.get("readOnly") or (spec.get("persistentVolumeClaim") or {}).get("readOnly"))


def _beside(worker: Container, engine: Container) -> bool:
    """Whether the worker's pod is required on its engine's node: a required pod affinity, per
    node, to the engine's pod."""
    terms = ((worker.pod.get("affinity") or {}).get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or []
    return any(
        term.get("topologyKey") == "kubernetes.io/hostname"
        and _selects(term.get("labelSelector") or {}, engine.labels)
        for term in terms
    )


def check_engine_nodes_wired(objects: Objects) -> list[str]:
    """Each engine: one worker, in a pod of its own on the engine's node, consumes that engine's
    queue; the key is ENGINE_KEY of the node's own Secret (for the plugin and vLLM); both pods
    mount the same node-local adapters volume (a local PersistentVolume or a hostPath) at the path
    the plugin is told, the engine read-only, and share no other writable one (/tmp)."""
    problems = []
    for c in containers(objects, init=False):
        if c.image_name != ENGINE_IMAGE:
            continue
        name = c.labels.get(ENGINE_LABEL)
        env = {item["name"]: item for item in c.spec.get("env") or []}
        own = own_secret(c.workload)
        for key_var in ("PORTAL_ENGINE_KEY", "VLLM_API_KEY"):
            ref = (env.get(key_var, {}).get("valueFrom") or {}).get("secretKeyRef") or {}
            if (ref.get("name"), ref.get("key")) != (own, "ENGINE_KEY"):
                problems.append(f"{c.where()}: {key_var} is not ENGINE_KEY of {own}")
        if env.get("VLLM_PLUGINS", {}).get("value") != "portal":
            problems.append(f"{c.where()}: VLLM_PLUGINS does not load the portal plugin")
        root = env.get("PORTAL_ADAPTER_ROOT", {}).get("value")
        mounts = {m["mountPath"]: m["name"] for m in c.spec.get("volumeMounts") or []}
        in_pod = [w for w in c.pod["containers"] if (w.get("args") or [None])[0] == ENGINE_WORKER]
        if in_pod:
            problems.append(f"{c.where()}: its worker shares the engine's pod (and its network)")
        workers = [w for w in _engine_workers(objects, c) if w.workload is not c.workload]
        if len(workers) != 1:
            problems.append(f"{c.where()}: {len(workers)} engine workers of its own")
            continue
        worker = workers[0]
        worker_env = {item["name"]: item.get("value") for item in worker.spec.get("env") or []}
        if worker_env.get("ENGINE_NAME") != name:
            problems.append(
                f"{c.where()}: its worker consumes the queue of {worker_env.get('ENGINE_NAME')}"
            )
        if not _beside(worker, c):
            problems.append(f"{c.where()}: its worker is not required on the engine's node")
        worker_mounts = {m["mountPath"]: m["name"] for m in worker.spec.get("volumeMounts") or []}
        ours = _volume_source(objects, c, mounts.get(root or "", ""))
        theirs = _volume_source(objects, worker, worker_mounts.get(root or "", ""))
        if root is None or ours is None or ours != theirs:
            problems.append(
                f"{c.where()}: engine and worker do not share a node-local volume at {root}"
            )
        problems += _shared_writable(objects, c, worker, adapters=ours)
    return problems


def _shared_writable(
    objects: Objects, engine: Container, worker: Container, adapters: tuple[str, str] | None
) -> list[str]:
    """The node's storage both pods of an engine node mount with one of them writing, but the
    adapters, which only the worker writes and the engine reads: through any other, either could
    plant files the other reads or runs."""
    ours = {
        _volume_source(objects, engine, m["name"]): m for m in engine.spec.get("volumeMounts") or []
    }
    theirs = {
        _volume_source(objects, worker, m["name"]): m for m in worker.spec.get("volumeMounts") or []
    }
    problems = []
    for source in sorted((ours.keys() & theirs.keys()) - {None}):  # type: ignore[type-var]
        engine_writes = not _volume_read_only(engine, ours[source]["name"])
        worker_writes = not _volume_read_only(worker, theirs[source]["name"])
        if source == adapters and not engine_writes:
            continue
        if engine_writes or worker_writes:
            problems.append(
                f"{engine.where()}: engine and worker share the writable volume "
                f"{ours[source]['name']} ({ours[source]['mountPath']})"
            )
    return problems


def _size_bytes(value: str) -> int:
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    value = value.strip().lower()
    return int(value[:-1]) * units[value[-1]] if value[-1] in units else int(value)


def check_ingress_caps(objects: Objects) -> list[str]:
    """The proxy refuses oversized bodies first, with the portal's own caps: not below them (it
    would refuse what the portal accepts) and at most 5% + 1 MiB above."""
    web = next((c for c in containers(objects) if c.role == "web"), None)
    if web is None:
        return ["no web container"]
    caps, error = portal_settings(web, objects)
    if caps is None:
        return [f"the portal's caps are unknown: {error}"]
    problems = []
    for obj in objects:
        if obj.get("kind") != "Ingress":
            continue
        paths = [p for rule in obj["spec"].get("rules") or [] for p in rule["http"]["paths"]]
        services = {p["backend"]["service"]["name"] for p in paths}
        if services == {"gateway"}:
            cap = caps["gateway"]
        elif any("upload" in p["path"] or "versions" in p["path"] for p in paths):
            cap = caps["upload"]
        else:
            cap = caps["request"]
        raw = (obj["metadata"].get("annotations") or {}).get(
            "nginx.ingress.kubernetes.io/proxy-body-size"
        )
        if raw is None:
            problems.append(f"Ingress {obj['metadata']['name']}: no body-size cap")
            continue
        size = _size_bytes(raw)
        if not cap <= size <= cap * 1.05 + 1024**2:
            problems.append(
                f"Ingress {obj['metadata']['name']}: body cap {raw} against the portal's {cap} bytes"
            )
    return problems


def _sample_paths(module: str, pattern: str) -> list[str]:
    """Request paths for the routes `module` declares with path("..."), e.g. portal/routing.py's
    websockets: each converter (`<slug:tenant>`) replaced by a sample value."""
    text = (REPO / module).read_text()
    return ["/" + re.sub(r"<[^>]+>", "sample", route) for route in re.findall(pattern, text)]


def socket_paths() -> list[str]:
    return _sample_paths("portal/routing.py", r'path\("(ws/[^"]*)"')


def _ingress_route(objects: Objects, path: str) -> tuple[dict[str, Any], str] | None:
    """The Ingress and Service a request path reaches (ingress-nginx: the longest match)."""
    best: tuple[int, dict[str, Any], str] | None = None
    for obj in objects:
        if obj.get("kind") != "Ingress":
            continue
        for rule in obj["spec"].get("rules") or []:
            for p in rule["http"]["paths"]:
                prefix = p["path"]
                if p.get("pathType") == "ImplementationSpecific":
                    matched = re.match(prefix, path) is not None
                else:
                    matched = path == prefix or path.startswith(prefix.rstrip("/") + "/")
                if matched and (best is None or len(prefix) > best[0]):
                    best = (len(prefix), obj, p["backend"]["service"]["name"])
    return (best[1], best[2]) if best else None


def _service_roles(objects: Objects, service_name: str) -> set[str]:
    """The portal processes behind a Service (its selector over the rendered pod templates)."""
    service = next(
        (
            o
            for o in objects
            if o.get("kind") == "Service" and o["metadata"]["name"] == service_name
        ),
        None,
    )
    if service is None:
        return set()
    selector = {"matchLabels": service["spec"].get("selector") or {}}
    return {c.role or "" for c in containers(objects) if _selects(selector, c.labels)}


def check_serving(objects: Objects) -> list[str]:
    """The site and the gateway stay up: web is ready only when /healthz says so, web and gateway
    each have a PodDisruptionBudget, a Job runs the migrations, the Ingress sends pages and
    websockets to web and /v1/ to the gateway, and keeps websockets open past nginx's 60 s."""
    problems = []
    web = next((c for c in containers(objects) if c.role == "web"), None)
    probe = ((web.spec.get("readinessProbe") or {}).get("httpGet") or {}) if web else {}
    if probe.get("path") != "/healthz":
        problems.append("web: its readiness probe is not /healthz")
    budgets = [o for o in objects if o.get("kind") == "PodDisruptionBudget"]
    for role in ("web", "gateway"):
        pods = [c for c in containers(objects) if c.role == role]
        if not any(
            _selects(b["spec"].get("selector") or {}, c.labels) for b in budgets for c in pods
        ):
            problems.append(f"{role}: no PodDisruptionBudget covers it")
    if not any(c.role == "migrate" and c.workload["kind"] == "Job" for c in containers(objects)):
        problems.append("no Job runs the migrations")
    wanted = [("/", "web"), ("/v1/chat/completions", "gateway")]
    wanted += [(path, "web") for path in socket_paths()]
    for path, role in wanted:
        route = _ingress_route(objects, path)
        if route is None or _service_roles(objects, route[1]) != {role}:
            problems.append(f"{path}: the Ingress does not send it to {role}")
        elif path.startswith("/ws/"):
            annotations = route[0]["metadata"].get("annotations") or {}
            for timeout in ("proxy-read-timeout", "proxy-send-timeout"):
                value = annotations.get(f"nginx.ingress.kubernetes.io/{timeout}", "60")
                if int(value) < WEBSOCKET_TIMEOUT_S:
                    problems.append(f"{path}: {timeout} {value} s cuts a live page's socket")
    return problems


def check_no_secret_values(objects: Objects) -> list[str]:
    return [
        f"Secret {obj['metadata']['name']} carries values in the manifests"
        for obj in objects
        if obj.get("kind") == "Secret"
    ]


def check_secrets_by_need(objects: Objects) -> list[str]:
    """Each container reads only its own workload's Secret, and gets from it only the keys its
    process uses (NEEDS): an engine node never gets SECRET_KEY, the evidence key, or another
    engine's key; beat never the engines' keys; and so on."""
    problems: list[str] = []
    for c in containers(objects):
        needs = NEEDS.get(process(c) or "")
        given, ref_problems = secrets_given(c)
        problems += ref_problems
        if needs is None:
            problems += [f"{c.where()}: gets {key}, and NEEDS has no entry for it" for key in given]
            continue
        own = own_secret(c.workload)
        for secret in sorted(set(given.values()) - {own}):
            problems.append(f"{c.where()}: reads Secret {secret}, not its own ({own})")
        problems += [
            f"{c.where()}: gets {key}, which it does not use"
            for key in sorted(set(given) - set(needs))
        ]
        problems += [
            f"{c.where()}: lacks {key}, which it uses" for key in sorted(set(needs) - set(given))
        ]
    return problems


def _policies(objects: Objects, labels: dict[str, str], direction: str) -> list[dict[str, Any]]:
    """The NetworkPolicies that select a pod with these labels in one direction."""
    return [
        np
        for np in objects
        if np.get("kind") == "NetworkPolicy"
        and _selects(np["spec"].get("podSelector") or {}, labels)
        and direction in np["spec"].get("policyTypes", ["Ingress"])
    ]


def check_data_services_policed(objects: Objects) -> list[str]:
    """Redis and PostgreSQL admit exactly the portal's pods whose Secret holds REDIS_URL or
    DATABASE_URL: no other pod, no address range, no other namespace."""
    pods = {
        w["metadata"]["name"]: pod_template(w)["metadata"].get("labels", {})
        for w in workloads(objects)
    }
    problems: list[str] = []
    for service, (key, port) in DATA_SERVICES.items():
        users = {
            c.workload["metadata"]["name"]
            for c in containers(objects)
            if key in secrets_given(c)[0]
        }
        policies = _policies(objects, {SERVICE_LABEL: service}, "Ingress")
        if not policies:
            problems.append(f"{service}: no NetworkPolicy selects it: every pod may connect")
            continue
        admitted: set[str] = set()
        for np in policies:
            where = f"NetworkPolicy {np['metadata']['name']}"
            for rule in np["spec"].get("ingress") or []:
                rule_ports = {p.get("port") for p in rule.get("ports") or []}
                if rule_ports and port not in rule_ports:
                    continue
                if not rule.get("from"):
                    problems.append(f"{where}: admits every source to {service}")
                    continue
                for peer in rule["from"]:
                    if set(peer) != {"podSelector"}:
                        problems.append(f"{where}: admits sources beyond the portal's pods")
                        continue
                    admitted |= {
                        n for n, labels in pods.items() if _selects(peer["podSelector"], labels)
                    }
        for name in sorted(admitted - users):
            problems.append(f"{service}: admits {name}, which does not use it")
        for name in sorted(users - admitted):
            problems.append(f"{service}: keeps out {name}, which uses it")
    return problems


def _egress_peers(
    objects: Objects, c: Container
) -> tuple[list[str], list[tuple[str, Any, set[Any]]]]:
    """The egress peers the NetworkPolicies selecting a container's pod allow, as (where, peer,
    ports; peer None for a rule without destinations); a problem if none selects the pod."""
    policies = _policies(objects, c.labels, "Egress")
    if not policies:
        return [f"{c.where()}: no egress NetworkPolicy: the pod may connect anywhere"], []
    peers: list[tuple[str, Any, set[Any]]] = []
    for np in policies:
        where = f"{c.where()}: {np['metadata']['name']}"
        for rule in np["spec"].get("egress") or []:
            rule_ports = {p.get("port") for p in rule.get("ports") or []}
            for peer in rule.get("to") or [None]:
                peers.append((where, peer, rule_ports))
    return [], peers


TRACE_COLLECTOR = "otel-collector"  # where engines send their spans (OTLP/HTTP)
TRACE_COLLECTOR_PORT = 4318


def check_engine_egress(objects: Objects) -> list[str]:
    """An engine's pod connects only to the cluster's DNS and the trace collector's OTLP port; its
    worker's pod only to those, the object store, the data services it uses and its own engine's
    port."""
    problems: list[str] = []
    pods = {
        w["metadata"]["name"]: pod_template(w)["metadata"].get("labels", {})
        for w in workloads(objects)
    }
    for c in containers(objects, init=False):
        if c.image_name != ENGINE_IMAGE and c.role != ENGINE_WORKER:
            continue
        missing, peers = _egress_peers(objects, c)
        problems += missing
        if missing:
            continue
        used = {
            service for service, (key, _) in DATA_SERVICES.items() if key in secrets_given(c)[0]
        }
        engines = [e for e in containers(objects, init=False) if e.image_name == ENGINE_IMAGE]
        own_engine = next(
            (e for e in engines if c.role and _is_worker_of(c.labels, e.labels)), None
        )
        engine_ports = {
            p["containerPort"] for p in (own_engine.spec.get("ports") or [] if own_engine else [])
        }
        # The trace collector (OTLP/HTTP, docs/observability.md) is allowed, never needed.
        allowed = {"dns", TRACE_COLLECTOR} | (
            {OBJECT_STORE, *used, "its engine"} if c.role else set()
        )
        reaches: set[str] = set()
        for where, peer, rule_ports in peers:
            if peer is None:
                problems.append(f"{where} lets the pod connect anywhere")
                continue
            service = (peer.get("podSelector") or {}).get("matchLabels", {}).get(SERVICE_LABEL)
            selected = {n for n, lb in pods.items() if _selects(peer.get("podSelector") or {}, lb)}
            if peer == DNS_PEER and rule_ports == {53}:
                reached = "dns"
            elif set(peer) == {"podSelector"} and service in {OBJECT_STORE, *DATA_SERVICES}:
                reached = service
            elif (
                set(peer) == {"podSelector"}
                and service == TRACE_COLLECTOR
                and rule_ports == {TRACE_COLLECTOR_PORT}
            ):
                reached = TRACE_COLLECTOR
            elif (
                own_engine is not None
                and set(peer) == {"podSelector"}
                and selected == {own_engine.workload["metadata"]["name"]}
                and rule_ports
                and rule_ports <= engine_ports
            ):
                reached = "its engine"
            else:
                reached = json.dumps(peer)
            if reached in allowed:
                reaches.add(reached)
            else:
                problems.append(f"{where} lets the pod connect to {reached}")
        needed = {"dns"} | ({OBJECT_STORE, *used, "its engine"} if c.role else set())
        for name in sorted(needed - reaches):
            problems.append(f"{c.where()}: its egress keeps out {name}, which it needs")
    return problems


def check_engine_egress_excludes_data_services(objects: Objects) -> list[str]:
    """No engine can open a connection to Redis or PostgreSQL: it shares its pod (whose network a
    NetworkPolicy governs as one) with no container that uses them, and the egress policies of
    its pod allow no peer that may be one of them (their pods, an address range, another
    namespace) on their ports."""
    problems: list[str] = []
    for c in containers(objects, init=False):
        if c.image_name != ENGINE_IMAGE:
            continue
        for other in c.pod["containers"]:
            given = secrets_given(Container(c.workload, c.pod, other))[0]
            for service, (key, _) in sorted(DATA_SERVICES.items()):
                if key in given:
                    problems.append(
                        f"{c.where()}: shares its pod with {other['name']}, which uses {service}"
                    )
        missing, peers = _egress_peers(objects, c)
        problems += [f"{m}, Redis and PostgreSQL included" for m in missing]
        for where, peer, rule_ports in peers:
            for service, (_, port) in sorted(DATA_SERVICES.items()):
                if rule_ports and port not in rule_ports:
                    continue
                if peer is None or set(peer) - {"podSelector"}:
                    problems.append(f"{where} lets the engine reach {service} (any address)")
                elif _selects(peer["podSelector"], {SERVICE_LABEL: service}):
                    problems.append(f"{where} lets the engine reach {service}")
    return problems


RULES: dict[str, Callable[[Objects], list[str]]] = {
    "settings provided": check_settings_provided,
    "engine ports policed": check_engine_ports_policed,
    "one beat": check_one_beat,
    "non-root": check_non_root,
    "resource requests": check_resource_requests,
    "engine nodes wired": check_engine_nodes_wired,
    "ingress caps": check_ingress_caps,
    "serving": check_serving,
    "no secret values": check_no_secret_values,
    "secrets by need": check_secrets_by_need,
    "data services policed": check_data_services_policed,
    "engine egress": check_engine_egress,
    "engine egress excludes data services": check_engine_egress_excludes_data_services,
}
