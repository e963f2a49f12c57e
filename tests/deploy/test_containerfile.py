"""The image builds from its recipe, checked in seconds without building it (`make image` does):
every local path requirements.txt names (the CLI's package, `-e ./client`) is, relative to where
pip runs, among exactly the files deploy/Containerfile's build stage copies (rebuilt in a temporary
folder from its COPY lines), with the package folders and script modules its pyproject.toml names;
and an editable install's source is in what the run stage takes from the build stage.

Why not pip's dry run: resolving the pinned names needs an index (PyPI, or a wheel cache this
machine does not keep), and preparing the local project needs its build backend (setuptools>=68,
fetched by build isolation); `--no-index --no-build-isolation` would try this venv's older
setuptools instead and fail for reasons the image does not have. A name cannot be missed by a
COPY; a path can, and that is what this checks, in milliseconds."""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest

from tests.paths import REPO

CONTAINERFILE = REPO / "deploy" / "Containerfile"
# What the build context leaves out (.containerignore) that could sit inside a copied folder.
CONTEXT_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


@dataclass
class Copy:
    sources: list[str]
    dest: PurePosixPath
    from_stage: str | None
    dest_is_dir: bool  # `dir/`, `.`: the sources go inside it


@dataclass
class Stage:
    name: str
    workdir: PurePosixPath = PurePosixPath("/")
    copies: list[Copy] = field(default_factory=list)
    # (shell command, the WORKDIR it runs in)
    runs: list[tuple[str, PurePosixPath]] = field(default_factory=list)


def parse(text: str) -> list[Stage]:
    """The stages of a Containerfile: their COPY instructions and RUN commands, with WORKDIRs."""
    stages: list[Stage] = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            parts = rest.split()
            name = parts[2] if len(parts) > 2 and parts[1].upper() == "AS" else str(len(stages))
            stages.append(Stage(name))
        elif not stages:
            continue
        elif word == "WORKDIR":
            stages[-1].workdir = stages[-1].workdir / rest.strip()
        elif word == "COPY":
            args = shlex.split(rest)
            flags = [a for a in args if a.startswith("--")]
            paths = [a for a in args if not a.startswith("--")]
            from_stage = next((f.split("=", 1)[1] for f in flags if f.startswith("--from=")), None)
            dest = PurePosixPath(paths[-1])
            dest = dest if dest.is_absolute() else stages[-1].workdir / dest
            copy = Copy(paths[:-1], dest, from_stage, paths[-1].endswith("/") or paths[-1] == ".")
            stages[-1].copies.append(copy)
        elif word == "RUN":
            stages[-1].runs.append((rest, stages[-1].workdir))
    return stages


def _inside(root: Path, path: PurePosixPath) -> Path:
    return root / str(path).lstrip("/")


def materialise(stage: Stage, root: Path, context: Path = REPO) -> None:
    """Exactly the files the stage copies from the build context, under `root` as its `/`."""
    for copy in stage.copies:
        if copy.from_stage is not None:
            continue
        many = len(copy.sources) > 1
        for source in copy.sources:
            src = context / source
            if src.is_dir():
                # A folder's contents land in the destination (not the folder itself).
                shutil.copytree(
                    src, _inside(root, copy.dest), dirs_exist_ok=True, ignore=CONTEXT_IGNORED
                )
            else:
                into_dir = many or copy.dest_is_dir or _inside(root, copy.dest).is_dir()
                target = _inside(root, copy.dest / src.name if into_dir else copy.dest)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, target)


@dataclass
class LocalRequirement:
    line: str
    path: PurePosixPath  # where pip looks, in the image
    editable: bool


def _pip_requirement_files(command: str) -> list[str]:
    """The files a RUN's `pip install -r FILE` commands install from."""
    files = []
    for part in re.split(r"&&|;", command):
        words = shlex.split(part)
        if "pip" in " ".join(words[:3]) and "install" in words:
            files += [
                words[i + 1] for i, w in enumerate(words[:-1]) if w in {"-r", "--requirement"}
            ]
    return files


def local_requirements(path: Path, cwd: PurePosixPath, root: Path) -> list[LocalRequirement]:
    """The local paths a requirements file names (nested -r files too): pip resolves a path in a
    requirement line against the directory it runs in, a nested file against its including file."""
    found = []
    for raw in path.read_text().splitlines():
        line = re.sub(r"(^|\s)#.*$", "", raw).strip()
        if not line:
            continue
        editable = False
        for option in ("-e ", "--editable ", "--editable="):
            if line.startswith(option):
                editable, line = True, line[len(option) :].strip()
        if line.startswith(("-r ", "--requirement ", "-c ", "--constraint ")):
            nested = PurePosixPath(line.split(None, 1)[1])
            nested = (
                nested
                if nested.is_absolute()
                else PurePosixPath(path.parent.relative_to(root).as_posix()) / nested
            )
            included = _inside(root, PurePosixPath("/") / nested)
            if not included.is_file():
                found.append(LocalRequirement(line, PurePosixPath("/") / nested, False))
                continue
            found += local_requirements(included, cwd, root)
            continue
        if line.startswith("-"):
            continue
        target = line.split(" @ ", 1)[1].strip() if " @ " in line else line
        if target.startswith("file:"):
            target = re.sub(r"^file:(//)?", "", target)
        elif not target.startswith((".", "/")):
            continue  # a name: the index provides it, not the copied files
        local = PurePosixPath(target.split("[", 1)[0])
        found.append(
            LocalRequirement(raw.strip(), local if local.is_absolute() else cwd / local, editable)
        )
    return found


def recipe_problems(text: str, context: Path = REPO) -> list[str]:
    """What keeps the recipe's pip installs from finding their local paths (empty: nothing)."""
    stages = parse(text)
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for stage in stages:
            installs = [
                (f, cwd) for command, cwd in stage.runs for f in _pip_requirement_files(command)
            ]
            if not installs:
                continue
            root = Path(tmp) / stage.name
            materialise(stage, root, context)
            for req_file, cwd in installs:
                file_path = PurePosixPath(req_file)
                file_path = file_path if file_path.is_absolute() else cwd / file_path
                if not _inside(root, file_path).is_file():
                    problems.append(f"stage {stage.name}: pip installs {file_path}, not copied")
                    continue
                for req in local_requirements(_inside(root, file_path), cwd, root):
                    problems += _check_local(stage, stages, root, req)
    return problems


def _project_files_missing(project: Path) -> list[str]:
    """The package folders a pyproject.toml (setuptools, its `packages` list) names that are not
    among the copied files, and the modules of its console scripts."""
    if not (project / "pyproject.toml").is_file():
        return []  # a setup.py project: its file list is code, not data
    config = tomllib.loads((project / "pyproject.toml").read_text())
    packages = config.get("tool", {}).get("setuptools", {}).get("packages", [])
    missing = [f"{p}/__init__.py" for p in packages if not (project / p / "__init__.py").is_file()]
    for target in config.get("project", {}).get("scripts", {}).values():
        module = target.split(":", 1)[0].replace(".", "/")
        if not (project / f"{module}.py").is_file() and not (project / module).is_dir():
            missing.append(f"{module}.py")
    return missing


def _check_local(stage: Stage, stages: list[Stage], root: Path, req: LocalRequirement) -> list[str]:
    where = _inside(root, req.path)
    if not ((where / "pyproject.toml").is_file() or (where / "setup.py").is_file()):
        return [f"stage {stage.name}: `{req.line}` names {req.path}, which the stage does not copy"]
    missing = _project_files_missing(where)
    if missing:
        return [f"stage {stage.name}: {req.path} lacks {', '.join(missing)}: pip cannot build it"]
    if not req.editable:
        return []
    # An editable install points at its source: the run stage must take it from this stage.
    final = stages[-1]
    carried = [
        c.sources[0]
        for c in final.copies
        if c.from_stage == stage.name
        and len(c.sources) == 1
        and (
            req.path == PurePosixPath(c.sources[0])
            or PurePosixPath(c.sources[0]) in req.path.parents
        )
    ]
    if final is not stage and not carried:
        return [
            f"the run stage does not take {req.path} from stage {stage.name}: `{req.line}` is editable"
        ]
    return []


def test_the_build_stage_has_every_local_path_requirements_names():
    assert recipe_problems(CONTAINERFILE.read_text()) == []


def test_requirements_name_the_client_by_path():
    """What the check above is for: were this gone, it would have nothing to check."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy2(REPO / "requirements.txt", Path(tmp) / "requirements.txt")
        found = local_requirements(Path(tmp) / "requirements.txt", PurePosixPath("/"), Path(tmp))
    assert [r.path for r in found] == [PurePosixPath("/client")]


# The build stage as it was when it could not build (requirements.txt alone in /tmp, pip run in
# /), one that builds but leaves the editable install's source behind in the build stage, and one
# that copies the client's pyproject.toml without its package.
OLD_BUILD_STAGE = """COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install -r /tmp/requirements.txt
"""
BROKEN_RECIPES = {
    "the recipe before the fix": (
        r"WORKDIR /opt/venv/src\n.*?-r requirements.txt\n",
        OLD_BUILD_STAGE,
        "`-e ./client` names /client, which the stage does not copy",
    ),
    "client left in the build stage": (
        r"WORKDIR /opt/venv/src\n",
        "WORKDIR /build\n",
        "the run stage does not take /build/client from stage build",
    ),
    "client without its package": (
        r"COPY client/lora_portal_client client/lora_portal_client\n",
        "",
        "/opt/venv/src/client lacks lora_portal_client/__init__.py",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_RECIPES))
def test_the_check_fails_on_a_broken_recipe(case):
    pattern, replacement, expected = BROKEN_RECIPES[case]
    text = CONTAINERFILE.read_text()
    broken = re.sub(pattern, lambda _: replacement, text, count=1, flags=re.DOTALL)
    assert broken != text
    problems = recipe_problems(broken)
    assert any(expected in p for p in problems), problems


def test_the_image_carries_the_redis_contracts_lua():
    """The gateway and the workers read their Redis scripts from .lua files at import
    (workers.redis_contract): the run stage must copy them beside the modules."""
    lua = sorted((REPO / "workers" / "redis_contract").glob("*.lua"))
    run = parse(CONTAINERFILE.read_text())[-1]
    with tempfile.TemporaryDirectory() as tmp:
        materialise(run, Path(tmp))
        app = _inside(Path(tmp), run.workdir)
        missing = [p.name for p in lua if not (app / p.relative_to(REPO)).is_file()]
    assert lua and missing == []
