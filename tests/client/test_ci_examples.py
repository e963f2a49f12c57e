"""The example pipelines in docs/ci/ call commands and options the CLI has (docs that drift
from the code fail here)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
import yaml
from lora_portal_client.cli import cli

DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci"
CALL = re.compile(r"lora-portal ([^|)\n]*)")


def scripts(node: object) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for value in node.values() for s in scripts(value)]
    if isinstance(node, list):
        return [s for value in node for s in scripts(value)]
    return []


def calls(name: str) -> list[list[str]]:
    text = "\n".join(scripts(yaml.safe_load((DOCS / name).read_text())))
    text = text.replace("\\\n", " ")  # shell line continuations
    return [shlex.split(found.strip()) for found in CALL.findall(text)]


def problems(words: list[str]) -> list[str]:
    command: click.Command = cli
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        sub = command.commands.get(words[0])
        if sub is None:
            return [f"no command {words[0]!r}"]
        command, words = sub, words[1:]
    options = {opt for param in command.params for opt in param.opts}
    return [
        f"{command.name}: no option {w}" for w in words if w.startswith("-") and w not in options
    ]


@pytest.mark.parametrize("name", ["github-actions.yml", "gitlab-ci.yml"])
def test_every_call_in_the_example_pipeline_exists(name):
    found = calls(name)
    assert len(found) >= 8
    assert [p for words in found for p in problems(words)] == []


def test_a_wrong_option_is_noticed():
    assert problems(["push", "dir", "--tennant", "acme"]) == ["push: no option --tennant"]
    assert problems(["alias", "promot"]) == ["no command 'promot'"]
