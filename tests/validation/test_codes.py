"""Every code the package can emit is listed once, with a template that renders."""

from __future__ import annotations

import re
from pathlib import Path

import adapters.validation as package
from adapters.validation import CODES
from adapters.validation.codes import issue

SOURCE = "".join(
    path.read_text()
    for path in Path(package.__file__).parent.glob("*.py")
    if path.name != "codes.py"
)
# issue("code", ...), _fail("code", ...), BaseModelSpecError("code", ...), and the mapping tables.
EMITTED = set(re.findall(r'(?:issue|_fail|BaseModelSpecError)\(\s*"([a-z_]+\.[a-z_0-9]+)"', SOURCE))
MAPPED = set(re.findall(r'"[a-z_]+": "((?:config|safetensors)\.[a-z_]+)"', SOURCE))


def test_every_code_the_package_emits_is_defined() -> None:
    assert EMITTED and MAPPED
    assert (EMITTED | MAPPED) - set(CODES) == set()


def test_every_defined_code_is_used_somewhere() -> None:
    literals = set(re.findall(r'"([a-z_]+\.[a-z_0-9]+)"', SOURCE))
    assert set(CODES) - literals == set()


def test_every_template_renders_with_its_parameters_and_without_them() -> None:
    for code, template in CODES.items():
        params = {name: f"<{name}>" for name in re.findall(r"{(\w+)}", template)}
        assert all(f"<{name}>" in issue(code, **params).message for name in params)
        assert issue(code).message  # a missing parameter never raises


def test_messages_from_hostile_values_are_bounded_and_printable() -> None:
    message = issue("tensors.name_invalid", name="\x1b[31m" + "x" * 10_000).message
    assert len(message) < 400 and "\x1b" not in message


def test_every_code_is_documented() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "validation.md").read_text()
    assert [code for code in CODES if f"`{code}`" not in docs] == []
