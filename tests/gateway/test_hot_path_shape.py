"""The request path stays in small steps: no function of its modules runs past ~40 lines or takes
more than five parameters (what one request carries travels as gateway.request.GatewayRequest,
not as a row of arguments). Read from the source, as tests/portal/test_layers.py reads imports."""

from __future__ import annotations

import ast

import pytest

from tests.paths import REPO

HOT_PATH = [
    "gateway/app.py",
    "gateway/request.py",
    "gateway/limits.py",
    "gateway/fairness.py",
    "gateway/exchange.py",
    "gateway/budgets.py",
    "gateway/playground.py",
    "gateway/recorder.py",
    "gateway/upstream.py",
    "gateway/request_schema.py",
]
MAX_LINES = 45  # ~40: a docstring's last line or a call's closing bracket is no new step
MAX_PARAMETERS = 5  # not counting self or cls


def _functions(path: str) -> list[tuple[str, int, int]]:
    """(name, lines, parameters) of every function in the module, methods and nested ones too."""
    tree = ast.parse((REPO / path).read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            if names and names[0] in ("self", "cls"):
                names = names[1:]
            count = len(names) + bool(args.vararg) + bool(args.kwarg)
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            out.append((f"{node.name}:{node.lineno}", lines, count))
    return out


@pytest.mark.parametrize("path", HOT_PATH)
def test_no_function_on_the_request_path_is_long_or_takes_many_arguments(path: str):
    too_big = [
        (name, lines, count)
        for name, lines, count in _functions(path)
        if lines > MAX_LINES or count > MAX_PARAMETERS
    ]
    assert too_big == [], f"{path}: (function, lines, parameters) over the bounds"


def test_the_scan_sees_a_function_over_the_bounds(tmp_path, monkeypatch):
    """The check can fail: a six-parameter function, and a long one, are both reported."""
    long_body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "m.py").write_text(
        f"def wide(a, b, c, d, e, f):\n    pass\n\ndef long():\n{long_body}\n"
    )
    monkeypatch.setattr("tests.gateway.test_hot_path_shape.REPO", tmp_path)
    found = {name.split(":")[0]: (lines, count) for name, lines, count in _functions("m.py")}
    assert found["wide"] == (2, 6) and found["long"][0] == MAX_LINES + 1
