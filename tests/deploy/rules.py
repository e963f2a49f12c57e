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
from typing import Any

from tests.deploy.manifests import (
    ENGINE_IMAGE,
    ENGINE_KEYS_SECRET,
    PORTAL_IMAGE,
    PORTAL_SECRET,
    REPO,
    Container,
    config_maps,
    containers,
    entrypoint_env_names,
    image_env,
    pod_template,
    portal_secret_keys,
    settings_env_reads,
    workloads,
)

Objects = list[dict[str, Any]]
COMPONENT = "app.kubernetes.io/component"
ENGINE_LABEL = "lora-portal.io/engine"
# Who may call an engine (README: workers and the gateway; web is the same ASGI app and probes
# engines for /healthz): components, plus the engine's own pod (its worker).
ENGINE_CLIENTS = {"gateway", "web", "worker"}
# Placeholders for the Secrets' values, which are not in the manifests: shaped like real ones.
SAMPLE_SECRET_VALUES = {
    "DATABASE_URL": "postgres://portal@db.invalid:5432/portal",
    "REDIS_URL": "redis://redis.invalid:6379/0",
    "S3_ACCESS_KEY_ID": "",
    "S3_SECRET_ACCESS_KEY": "",
}
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


def _secret_value(name: str, objects: Objects) -> str:
    if name == "PORTAL_ENGINE_KEYS":
        return json.dumps({engine: _placeholder(engine) for engine in engine_names(objects)})
    return SAMPLE_SECRET_VALUES.get(name, _placeholder(name))


def container_env(c: Container, objects: Objects) -> tuple[dict[str, str], list[str]]:
    """The environment a portal container starts with (image ENV, then envFrom, then env), with
    placeholders for secret values; and what is wrong with its references."""
    env = dict(image_env())
    problems: list[str] = []
    maps = config_maps(objects)
    for source in c.spec.get("envFrom") or []:
        if "configMapRef" in source:
            name = source["configMapRef"]["name"]
            if name not in maps:
                problems.append(
                    f"{c.where()}: envFrom names ConfigMap {name}, which is not rendered"
                )
            env.update(maps.get(name, {}))
        elif "secretRef" in source:
            name = source["secretRef"]["name"]
            if name != PORTAL_SECRET:
                problems.append(f"{c.where()}: envFrom names Secret {name}, not {PORTAL_SECRET}")
                continue
            env.update({key: _secret_value(key, objects) for key in portal_secret_keys()})
    for item in c.spec.get("env") or []:
        name = item["name"]
        ref = (item.get("valueFrom") or {}).get("secretKeyRef")
        if ref is not None:
            if ref["name"] == PORTAL_SECRET and ref["key"] not in portal_secret_keys():
                problems.append(f"{c.where()}: {name} names key {ref['key']}, not in the example")
            env[name] = _secret_value(name, objects)
        else:
            env[name] = str(item.get("value", ""))
    return env, problems


_DEPLOY_CHECK = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings"
import django
django.setup()
from django.conf import settings
from django.core.management import call_command
from portal.body_limits import body_cap
call_command("check", deploy=True, verbosity=0)
print(json.dumps({
    "request": body_cap("application/json"),
    "upload": body_cap("multipart/form-data"),
    "gateway": settings.GATEWAY_MAX_BODY_BYTES,
}))
"""


@functools.cache
def _deploy_check(env_items: tuple[tuple[str, str], ...]) -> tuple[bool, str]:
    env = dict(env_items)
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
            timeout=120,
        )
    if result.returncode != 0:
        return False, (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    return True, result.stdout.strip().splitlines()[-1]


def portal_settings(c: Container, objects: Objects) -> tuple[dict[str, int] | None, str]:
    """The portal's body caps as this container's settings give them, after `manage.py check
    --deploy` passed in its environment; None and the error when it did not."""
    env, _ = container_env(c, objects)
    # Only what the settings read: the entry point's own variables (queue, concurrency) do not
    # change them, so most containers share one check.
    reads = settings_env_reads()
    settings_env = {k: v for k, v in env.items() if k in reads or k in FRAMEWORK_ENV}
    ok, output = _deploy_check(tuple(sorted(settings_env.items())))
    return (json.loads(output), "") if ok else (None, output)


# --- the rules ------------------------------------------------------------------------------


def check_settings_provided(objects: Objects) -> list[str]:
    """Every setting the portal reads is provided or defaulted, no unknown name is given, and the
    portal starts and passes `manage.py check --deploy` with what each container gets."""
    reads = settings_env_reads()
    known = set(reads) | set(image_env()) | entrypoint_env_names() | FRAMEWORK_ENV
    problems: list[str] = []
    for c in containers(objects):
        if c.image_name != PORTAL_IMAGE:
            continue
        env, ref_problems = container_env(c, objects)
        problems += ref_problems
        missing = sorted(
            name for name, defaulted in reads.items() if not defaulted and name not in env
        )
        problems += [f"{c.where()}: {name} is required and not provided" for name in missing]
        unknown = sorted(set(env) - known)
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


def check_engine_ports_policed(objects: Objects) -> list[str]:
    """Each engine port is reachable only from the gateway, web, the shared workers and the
    engine's own pod, through NetworkPolicies that select the engine's pod, and the gateway and
    the engine's own worker can reach it."""
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
                        if name == c.workload["metadata"]["name"]:
                            reaches.add("itself")
                        elif component in ENGINE_CLIENTS:
                            reaches.add(component)
                        else:
                            problems.append(
                                f"{c.where()}: {np['metadata']['name']} admits {name} ({component})"
                            )
        for needed in ("gateway", "itself"):
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


def check_engine_nodes_wired(objects: Objects) -> list[str]:
    """Each engine pod: its worker consumes that engine's queue, the key is that engine's entry
    of engine-keys (for the plugin and vLLM), and both containers share the adapter volume at
    the path the plugin is told."""
    problems = []
    for c in containers(objects, init=False):
        if c.image_name != ENGINE_IMAGE:
            continue
        name = c.labels.get(ENGINE_LABEL)
        env = {item["name"]: item for item in c.spec.get("env") or []}
        for key_var in ("PORTAL_ENGINE_KEY", "VLLM_API_KEY"):
            ref = (env.get(key_var, {}).get("valueFrom") or {}).get("secretKeyRef") or {}
            if (ref.get("name"), ref.get("key")) != (ENGINE_KEYS_SECRET, name):
                problems.append(
                    f"{c.where()}: {key_var} is not entry {name} of {ENGINE_KEYS_SECRET}"
                )
        if env.get("VLLM_PLUGINS", {}).get("value") != "portal":
            problems.append(f"{c.where()}: VLLM_PLUGINS does not load the portal plugin")
        root = env.get("PORTAL_ADAPTER_ROOT", {}).get("value")
        mounts = {m["mountPath"]: m["name"] for m in c.spec.get("volumeMounts") or []}
        workers = [
            w for w in c.pod["containers"] if w.get("args") and w["args"][0] == "engine-worker"
        ]
        if len(workers) != 1:
            problems.append(f"{c.where()}: {len(workers)} engine workers beside the engine")
            continue
        worker = workers[0]
        worker_env = {item["name"]: item.get("value") for item in worker.get("env") or []}
        if worker_env.get("ENGINE_NAME") != name:
            problems.append(
                f"{c.where()}: its worker consumes the queue of {worker_env.get('ENGINE_NAME')}"
            )
        worker_mounts = {m["mountPath"]: m["name"] for m in worker.get("volumeMounts") or []}
        if root is None or root not in mounts or worker_mounts.get(root) != mounts[root]:
            problems.append(f"{c.where()}: engine and worker do not share {root}")
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
}
