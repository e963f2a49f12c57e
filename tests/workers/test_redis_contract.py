"""The Redis contract's scripts (workers.redis_contract): composed from their .lua files with
nothing left out or left over, and accepted by Redis as they are sent. What the scripts do is
tested through their callers (tests/gateway/test_engine_admission.py, tests/workers/
test_pin_slots.py, tests/gateway/test_replica_lease.py, tests/faults)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers import shared_state
from workers.redis_contract import scripts

SCRIPTS = {
    name: getattr(scripts, name)
    for name in (
        "ENTER",
        "LEAVE",
        "REAP",
        "PIN_CLAIM",
        "PINS_OBSERVED",
        "SLOT_ENTER",
        "BUDGET_SETTLE",
        "CONVERSATION_TURNS",
    )
}
LUA = sorted(Path(scripts.__file__).parent.glob("*.lua"))


def _code(lua: Path) -> str:
    """The file's first line of code (its comments are not code)."""
    return next(line for line in lua.read_text().splitlines() if not line.startswith("--"))


@pytest.mark.parametrize("lua", LUA, ids=lambda p: p.name)
def test_every_lua_file_is_in_a_script(lua):
    assert any(_code(lua) in script for script in SCRIPTS.values())


def test_the_admission_is_composed_whole():
    enter = scripts.ENTER
    assert "ENTER_BODY" not in enter and "CONCURRENCY_TTL" not in enter
    assert f"EXPIRE', key, {scripts.CONCURRENCY_TTL_S})" in enter
    # the shared functions are written once and defined once in each script that calls them
    assert enter.count("local function admit(") == 1
    assert scripts.SLOT_ENTER.count("local function distinct_unpinned(") == 1


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_redis_compiles_each_script(name):
    client = shared_state.client()
    sha = client.script_load(SCRIPTS[name])
    assert client.script_exists(sha) == [True]
