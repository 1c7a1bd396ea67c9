"""The Argo CD health check, run by a real Lua 5.1 interpreter (as Argo CD's gopher-lua speaks 5.1)."""

from pathlib import Path
from typing import Any

import pytest
from lupa import lua51 as lupa

SCRIPT = (Path(__file__).resolve().parents[2] / "gitops" / "argocd" / "health.lua").read_text()


def health(obj: dict[str, Any]) -> dict[str, str]:
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)

    def to_lua(value: Any) -> Any:
        if isinstance(value, dict):
            return lua.table_from({k: to_lua(v) for k, v in value.items()})
        if isinstance(value, list):
            return lua.table_from([to_lua(v) for v in value])
        return value

    lua.globals().obj = to_lua(obj)
    result = lua.execute(SCRIPT)
    return {"status": result["status"], "message": result["message"]}


def server(generation: int = 1, **status: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"metadata": {"name": "s", "generation": generation}, "spec": {}}
    if status:
        obj["status"] = status
    return obj


def conds(**states: bool) -> list[dict[str, str]]:
    return [
        {"type": kind, "status": "True" if value else "False", "reason": f"{kind}Reason", "message": f"{kind} says"}
        for kind, value in states.items()
    ]


ALL_FALSE = {"Ready": False, "Reconciling": False, "Stalled": False, "Degraded": False, "FallbackActive": False}


def with_(**changes: bool) -> list[dict[str, str]]:
    return conds(**{**ALL_FALSE, **changes})


CASES = [
    ("no status yet", server(), "Progressing"),
    (
        "generation not observed",
        server(generation=3, observedGeneration=2, conditions=with_(Ready=True)),
        "Progressing",
    ),
    ("serving", server(observedGeneration=1, conditions=with_(Ready=True)), "Healthy"),
    ("rolling out", server(observedGeneration=1, conditions=with_(Reconciling=True)), "Progressing"),
    ("planner refused", server(observedGeneration=1, conditions=with_(Stalled=True)), "Degraded"),
    (
        "rolled back",
        server(observedGeneration=1, conditions=with_(Stalled=True, Degraded=True, Ready=False)),
        "Degraded",
    ),
    (
        "fallback serving",
        server(observedGeneration=1, conditions=with_(FallbackActive=True, Degraded=True)),
        "Degraded",
    ),
    (
        "bridging a switch",
        server(observedGeneration=1, conditions=with_(Reconciling=True, FallbackActive=True)),
        "Progressing",
    ),
    ("replicas short", server(observedGeneration=1, conditions=with_(Ready=True, Degraded=True)), "Degraded"),
    ("waiting for vLLM", server(observedGeneration=1, conditions=with_()), "Progressing"),
]


@pytest.mark.parametrize(("case", "obj", "expected"), CASES, ids=[c[0] for c in CASES])
def test_health_of_sample_statuses(case: str, obj: dict[str, Any], expected: str) -> None:
    result = health(obj)
    assert result["status"] == expected, (case, result)
    assert result["message"]


def test_stalled_message_carries_the_reason() -> None:
    result = health(server(observedGeneration=1, conditions=with_(Stalled=True)))
    assert result["message"].startswith("StalledReason: Stalled says")
