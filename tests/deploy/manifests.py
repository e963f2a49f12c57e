"""The rendered Kubernetes manifests (deploy/k8s) and what the repository says they must provide:
the settings the portal reads from the environment, the image's own environment, the entry
point's variables and the keys of the Secrets the operator creates."""

from __future__ import annotations

import ast
import functools
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import yaml

from tests.paths import REPO

K8S = REPO / "deploy" / "k8s"
OVERLAYS = ("dev", "production")
PORTAL_IMAGE = "lora-portal"
ENGINE_IMAGE = "lora-portal-engine"
# The Secrets the operator creates (docs/deploy.md 3.2), one per workload, `<workload>-secrets`;
# the manifests only name them. Their keys: the examples in deploy/k8s/secrets/.
SECRETS_DIR = K8S / "secrets"
SECRET_SUFFIX = "-secrets"
ENGINE_SECRET_EXAMPLE = "engine-node"
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job"}
ENGINE_LABEL = "lora-portal.io/engine"


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        raise RuntimeError("kubectl is missing: run scripts/ensure_k8s_tools.sh (make test does)")
    return path


@functools.cache
def rendered_text(overlay: str) -> str:
    result = subprocess.run(
        [kubectl(), "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay} failed: {result.stderr}")
    return result.stdout


def render(overlay: str) -> list[dict[str, Any]]:
    """A fresh copy of the overlay's objects (the rule tests mutate theirs)."""
    return [doc for doc in yaml.safe_load_all(rendered_text(overlay)) if doc]


@dataclass
class Container:
    workload: dict[str, Any]
    pod: dict[str, Any]
    spec: dict[str, Any]

    @property
    def image_name(self) -> str:
        """The repository's last path segment, without tag: overlays rename the registry."""
        return str(self.spec.get("image", "")).rsplit("/", 1)[-1].split(":", 1)[0]

    @property
    def labels(self) -> dict[str, str]:
        return dict(pod_template(self.workload).get("metadata", {}).get("labels", {}))

    @property
    def role(self) -> str | None:
        """The portal process (deploy/entrypoint.sh's first argument)."""
        args = self.spec.get("args") or []
        return str(args[0]) if args and self.image_name == PORTAL_IMAGE else None

    def where(self) -> str:
        return f"{self.workload['kind']}/{self.workload['metadata']['name']}:{self.spec['name']}"


def pod_template(workload: dict[str, Any]) -> dict[str, Any]:
    return dict(workload["spec"]["template"])


def workloads(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    return (obj for obj in objects if obj.get("kind") in WORKLOAD_KINDS)


def containers(objects: list[dict[str, Any]], *, init: bool = True) -> Iterator[Container]:
    for workload in workloads(objects):
        pod = pod_template(workload)["spec"]
        fields = ("initContainers", "containers") if init else ("containers",)
        for field in fields:
            for spec in pod.get(field) or []:
                yield Container(workload, pod, spec)


def config_maps(objects: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        obj["metadata"]["name"]: dict(obj.get("data") or {})
        for obj in objects
        if obj.get("kind") == "ConfigMap"
    }


# --- what the repository says --------------------------------------------------------------


@functools.cache
def env_readers() -> frozenset[str]:
    """The readers portal/env.py defines: its functions whose first parameter is the name."""
    tree = ast.parse((REPO / "portal" / "env.py").read_text())
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.args.args and node.args.args[0].arg == "name"
    )


def _reader_called(node: ast.AST) -> str | None:
    """The function a call names (`env_int(...)` or `env.env_int(...)`), else None."""
    if not isinstance(node, ast.Call):
        return None
    if isinstance(node.func, ast.Name):
        return node.func.id
    return node.func.attr if isinstance(node.func, ast.Attribute) else None


def _gives_default(call: ast.Call) -> bool:
    """Whether a reader call has a default: all do but env_str, whose default is optional (None:
    the setting is required and start-up stops without it)."""
    if _reader_called(call) != "env_str":
        return True
    default = call.args[1] if len(call.args) > 1 else None
    default = next((k.value for k in call.keywords if k.arg == "default"), default)
    return default is not None and not (isinstance(default, ast.Constant) and default.value is None)


def settings_source() -> str:
    return (REPO / "portal" / "settings.py").read_text()


@functools.cache
def settings_env_reads(source: str | None = None) -> dict[str, bool]:
    """Every variable portal/settings.py (or `source`) reads through portal/env.py -> whether the
    call gives it a default. settings_direct_reads() must stay empty for this to be the whole
    list."""
    readers = env_readers()
    reads: dict[str, bool] = {}
    for node in ast.walk(ast.parse(source or settings_source())):
        if (
            isinstance(node, ast.Call)
            and _reader_called(node) in readers
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            name = node.args[0].value
            reads[name] = reads.get(name, False) or _gives_default(node)
    return reads


def settings_direct_reads(source: str | None = None) -> list[str]:
    """Environment reads in portal/settings.py (or `source`) that settings_env_reads() cannot
    name: os.environ or os.getenv, or a reader called with a computed name (`line N: its text`)."""
    readers = env_readers()
    source = source or settings_source()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.expr):
            continue
        direct = (isinstance(node, ast.Attribute) and node.attr in {"environ", "getenv"}) or (
            isinstance(node, ast.Name) and node.id in {"environ", "getenv"}
        )
        computed = (
            isinstance(node, ast.Call)
            and _reader_called(node) in readers
            and not (node.args and isinstance(node.args[0], ast.Constant))
        )
        if direct or computed:
            line = f"line {node.lineno}: {source.splitlines()[node.lineno - 1].strip()}"
            if line not in found:
                found.append(line)
    return found


def readme_settings() -> set[str]:
    """The variables README's settings table names (its first column)."""
    text = (REPO / "README.md").read_text()
    table = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for line in table.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    return names


@functools.cache
def image_env() -> dict[str, str]:
    """The ENV of deploy/Containerfile's last stage (what every portal container starts with)."""
    text = (REPO / "deploy" / "Containerfile").read_text().replace("\\\n", " ")
    last_stage = re.split(r"^FROM\s", text, flags=re.MULTILINE)[-1]
    env: dict[str, str] = {}
    for line in last_stage.splitlines():
        if line.startswith("ENV "):
            for name, value in re.findall(r"([A-Z_][A-Z0-9_]*)=(\S+)", line):
                env[name] = value
    return env


@functools.cache
def entrypoint_env_names() -> frozenset[str]:
    """Variables deploy/entrypoint.sh reads to build a process's command line."""
    text = (REPO / "deploy" / "entrypoint.sh").read_text()
    return frozenset(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", text))


def own_secret(workload: dict[str, Any]) -> str:
    """The name of a workload's own Secret: an engine node's two pods (the engine, its worker)
    share their node's, `engine-<name>-secrets`."""
    engine = pod_template(workload).get("metadata", {}).get("labels", {}).get(ENGINE_LABEL)
    if engine is not None:
        return f"engine-{engine}{SECRET_SUFFIX}"
    return f"{workload['metadata']['name']}{SECRET_SUFFIX}"


def secret_example(secret: str) -> str | None:
    """The example file (deploy/k8s/secrets/<name>.example.env) that lists a Secret's keys:
    `<workload>-secrets` -> <workload>, every `engine-<name>-secrets` -> engine-node."""
    if not secret.endswith(SECRET_SUFFIX):
        return None
    base = secret.removesuffix(SECRET_SUFFIX)
    if base.startswith("engine-"):
        base = ENGINE_SECRET_EXAMPLE
    return base if (SECRETS_DIR / f"{base}.example.env").is_file() else None


@functools.cache
def example_keys(example: str) -> frozenset[str]:
    """The keys an example Secret file names (it gives none a value)."""
    keys = set()
    for line in (SECRETS_DIR / f"{example}.example.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            if value:
                raise ValueError(f"{example}.example.env gives {name} a value")
            keys.add(name)
    return frozenset(keys)


def secret_keys(secret: str) -> frozenset[str] | None:
    """The keys of a Secret the operator creates; None for a Secret no example describes."""
    example = secret_example(secret)
    return None if example is None else example_keys(example)


def examples() -> list[str]:
    return sorted(p.name.removesuffix(".example.env") for p in SECRETS_DIR.glob("*.example.env"))
