"""Request-level proof of every switch: real pods of the engine stand-ins on a real node, clients sending
completions and streamed chats through the stable Service's ClusterIP for the whole scenario.

Each scenario test asserts what clients see besides the failure count (which models answered, in which order,
that no answer names another model id); the failure count of each is asserted by its own test just after it, so a
known loss can be marked expected without hiding the rest.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes_asyncio.client.api_client import ApiClient

from localcluster.realnode import REAL_NODE_LABEL
from tests.conftest import ClusterHandle, kubectl
from tests.support.operator import OperatorProcess, Servers
from tests.support.traffic_scenarios import (
    BIG_MODEL_A,
    BIG_MODEL_B,
    MODEL_A,
    MODEL_B,
    NEVER_READY,
    OLLAMA_BACKEND,
    REJECTED_COMMAND_LINE,
    Load,
    ScenarioResult,
    auto_bridge,
    bluegreen_switch,
    failover,
    operator_killed_mid_switch,
    rollback,
    steady,
)

pytestmark = pytest.mark.dataplane
Start = Callable[..., OperatorProcess]
LOAD = Load(clients=8, min_requests=2000)
RESULTS: dict[str, ScenarioResult] = {}
# Without the controller's drain (old pods keep serving until kube-proxy has moved traffic away), a switch loses
# the connections kube-proxy still sends to an old pod after it got SIGTERM and closed its listener: 0 in some
# runs, up to 6 of ~2,500 in others, by timing. Not strict until the drain makes it 0 every time.
NO_DRAIN = (
    "the controller does not yet drain old pods (preStop sleep, termination grace) before deleting them: "
    "requests on connections an old pod accepted when it got SIGTERM are cut"
)
# Until then a switch may cut what the clients send in that short window: at most two requests per client.
LOSS_BOUND_WITHOUT_DRAIN = 2 * LOAD.clients


@pytest.fixture
def servers(api: ApiClient, namespace: str) -> Servers:
    return Servers(api, namespace)


def record(result: ScenarioResult) -> ScenarioResult:
    RESULTS[result.name] = result
    print(result.line())
    print(result.report.summary())
    if result.report.failures:
        print(result.report.failure_lines())
    return result


def assert_cut_at_most_in_flight(result: ScenarioResult) -> None:
    failures = result.report.failures
    assert len(failures) <= LOSS_BOUND_WITHOUT_DRAIN, result.report.failure_lines()
    assert all("wrong model" not in (f.error or "") for f in failures), result.report.failure_lines()


def assert_no_loss(name: str) -> None:
    if name not in RESULTS:
        pytest.skip(f"scenario {name} did not run")
    report = RESULTS[name].report
    assert report.sent >= LOAD.min_requests
    assert not report.failures, f"{name}: {report.summary()}\n{report.failure_lines()}"


async def test_real_node_runs_pods_and_kubectl_reads_their_logs(
    operator_factory: Start, servers: Servers, namespace: str, crd_installed: ClusterHandle
) -> None:
    operator_factory()
    result = record(await steady(servers, Load(clients=2, min_requests=200)))
    assert result.report.backends() == [MODEL_A]
    assert not result.report.failures, result.report.failure_lines()
    nodes = kubectl(crd_installed, "get", "nodes", "-l", f"{REAL_NODE_LABEL}=true", "-o", "name").stdout.split()
    assert nodes == ["node/real-0"]
    pods = kubectl(crd_installed, "get", "pods", "-n", namespace, "-o", "name").stdout.split()
    assert len(pods) == 1
    logs = kubectl(crd_installed, "logs", "-n", namespace, pods[0]).stdout
    assert f"serving {MODEL_A}" in logs


async def test_bluegreen_switch_answers_with_one_model_at_a_time(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    result = record(await bluegreen_switch(servers, LOAD))
    assert result.report.backends() == [MODEL_A, MODEL_B]
    assert result.report.mixed_answers() == []
    assert result.apply_to_first_answer() is not None
    assert_cut_at_most_in_flight(result)


@pytest.mark.xfail(strict=False, reason=NO_DRAIN)
def test_bluegreen_switch_loses_no_request() -> None:
    assert_no_loss("bluegreen-switch")


async def test_auto_switch_with_every_gpu_held_is_bridged_by_ollama(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    result = record(await auto_bridge(servers, LOAD, gpus=8))
    assert result.report.backends() == [BIG_MODEL_A, OLLAMA_BACKEND, BIG_MODEL_B]
    assert result.report.mixed_answers() == []
    assert_cut_at_most_in_flight(result)


@pytest.mark.xfail(strict=False, reason=NO_DRAIN)
def test_auto_bridge_loses_no_request() -> None:
    assert_no_loss("auto-bridge")


async def test_revision_whose_command_line_is_refused_is_rolled_back(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    result = record(await rollback(servers, LOAD, REJECTED_COMMAND_LINE, "rollback-refused-flags"))
    assert result.notes["active_revision_after"] == result.notes["old_revision"]
    assert result.report.backends() == [MODEL_A]


def test_rollback_of_refused_command_line_loses_no_request() -> None:
    assert_no_loss("rollback-refused-flags")


async def test_revision_that_never_becomes_ready_is_rolled_back(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    result = record(await rollback(servers, LOAD, NEVER_READY, "rollback-never-ready"))
    assert result.notes["active_revision_after"] == result.notes["old_revision"]
    assert result.report.backends() == [MODEL_A]


def test_rollback_of_never_ready_revision_loses_no_request() -> None:
    assert_no_loss("rollback-never-ready")


async def test_failover_when_vllm_stops_answering_and_recovery(operator_factory: Start, servers: Servers) -> None:
    operator_factory()
    result = record(await failover(servers, LOAD))
    report = result.report
    assert report.backends() == [MODEL_A, OLLAMA_BACKEND, MODEL_A]
    # Requests fail only between vLLM hanging and Ollama answering; none after recovery.
    hang_at, on_ollama_at = result.notes["hang_at"], result.notes["on_ollama_at"]
    late = [f for f in report.failures if not hang_at <= f.started <= on_ollama_at]
    timeline = {k: round(v - hang_at, 2) for k, v in result.notes.items()}
    assert late == [], f"{timeline}\n" + "\n".join(f"+{f.started - hang_at:.2f}s {f.kind} {f.error}" for f in late[:30])
    print(f"failover: {len(report.failures)} requests failed in the {on_ollama_at - hang_at:.1f} s to Ollama")


async def test_operator_killed_mid_switch_is_finished_by_the_next_one(
    operator_factory: Start, servers: Servers
) -> None:
    first = operator_factory()
    result = record(await operator_killed_mid_switch(servers, LOAD, operator_factory, first))
    assert result.report.backends() == [MODEL_A, MODEL_B]
    assert result.report.mixed_answers() == []
    assert_cut_at_most_in_flight(result)


@pytest.mark.xfail(strict=False, reason=NO_DRAIN)
def test_operator_killed_mid_switch_loses_no_request() -> None:
    assert_no_loss("operator-killed-mid-switch")
