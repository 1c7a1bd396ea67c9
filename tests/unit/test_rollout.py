"""Every transition of the rollout and fallback state machine."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from inference_operator.controller.rollout import (
    Decision,
    Desired,
    FallbackPolicy,
    Memory,
    Observed,
    RevisionObservation,
    Rollout,
    decide,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
STANDBY = FallbackPolicy(mode="Standby", activate_after=60, recover_after=120)
ON_DEMAND = FallbackPolicy(mode="OnDemand", activate_after=60, recover_after=120)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def want(rev: str = "b", strategy: str = "BlueGreen", fallback: FallbackPolicy | None = None, n: int = 1) -> Desired:
    return Desired(revision=rev, replicas=n, strategy=strategy, timeout=600, fallback=fallback)  # type: ignore[arg-type]


def ready(n: int = 1) -> RevisionObservation:
    return RevisionObservation(replicas=n, ready=n)


def pending(**kw: object) -> RevisionObservation:
    return RevisionObservation(replicas=1, ready=0, **kw)  # type: ignore[arg-type]


def seen(
    ollama: bool = False, endpoints: tuple[str, ...] = (), ollama_replicas: int = 0, **revisions: RevisionObservation
) -> Observed:
    return Observed(
        revisions=revisions,
        ollama_ready=ollama,
        ollama_replicas=ollama_replicas or (1 if ollama else 0),
        endpoints=frozenset(endpoints),
    )


def stable(rev: str = "a") -> Memory:
    return Memory(
        active_revision=rev,
        backend="vllm",
        rollout=Rollout(state="Idle", to_revision=rev, result="Succeeded", start_time=T0, end_time=T0),
        serving=rev,
    )


def reasons(d: Decision) -> list[str]:
    return [e.reason for e in d.events]


# ---- first deployment ---------------------------------------------------------------------------


def test_first_deployment_starts_a_rollout() -> None:
    d = decide(want("a"), seen(), Memory(), T0)
    assert reasons(d) == ["RolloutStarted"]
    assert d.deployments == {"a": 1}
    assert (d.backend, d.revision) == ("vllm", "a")
    assert d.memory.rollout.in_progress
    assert d.requeue_after == pytest.approx(600)


def test_first_deployment_succeeds_when_ready() -> None:
    started = decide(want("a"), seen(), Memory(), T0).memory
    d = decide(want("a"), seen(a=ready()), started, at(5))
    assert reasons(d) == ["RolloutSucceeded"]
    assert d.memory.active_revision == "a"
    assert d.memory.rollout.result == "Succeeded"
    assert d.serving_ready


def test_first_deployment_failure_is_reported_and_keeps_trying() -> None:
    started = decide(want("a"), seen(), Memory(), T0).memory
    d = decide(want("a"), seen(a=pending(failure="container vllm: CrashLoopBackOff")), started, at(5))
    assert reasons(d) == ["RolloutFailed"]
    assert d.memory.rollout.result == "Failed"
    assert d.deployments == {"a": 1}
    later = decide(want("a"), seen(a=ready()), d.memory, at(50))
    assert later.memory.active_revision == "a"
    assert reasons(later) == ["RolloutSucceeded"]


def test_first_deployment_times_out_with_the_scheduling_reason() -> None:
    started = decide(want("a"), seen(), Memory(), T0).memory
    d = decide(want("a"), seen(a=pending(unschedulable="0/6 nodes: Insufficient nvidia.com/gpu")), started, at(601))
    assert d.memory.rollout.result == "Failed"
    assert "not ready within 600s: 0/6 nodes: Insufficient nvidia.com/gpu" in (d.memory.rollout.message or "")


def test_first_deployment_moves_to_ollama_when_vllm_is_slow() -> None:
    started = decide(want("a", fallback=STANDBY), seen(), Memory(), T0).memory
    waiting = decide(want("a", fallback=STANDBY), seen(ollama=True, a=pending()), started, at(10))
    assert waiting.backend == "vllm"
    d = decide(want("a", fallback=STANDBY), seen(ollama=True, a=pending()), waiting.memory, at(70))
    assert d.backend == "ollama"
    assert "FallbackActivated" in reasons(d)
    done = decide(want("a", fallback=STANDBY), seen(ollama=True, a=ready()), d.memory, at(80))
    assert done.backend == "vllm"  # a verified new revision takes traffic at once


# ---- steady state and fallback ------------------------------------------------------------------


def test_healthy_server_changes_nothing() -> None:
    d = decide(want("a"), seen(a=ready()), stable(), at(100))
    assert d.events == ()
    assert d.deployments == {"a": 1}
    assert d.requeue_after is None
    assert d.memory == stable()


def test_replica_change_keeps_the_revision() -> None:
    d = decide(want("a", n=3), seen(a=ready()), stable(), at(100))
    assert d.deployments == {"a": 3}
    assert d.events == ()


def test_unready_vllm_starts_the_activation_window() -> None:
    d = decide(want("a", fallback=STANDBY), seen(ollama=True, a=pending()), stable(), at(100))
    assert d.backend == "vllm"
    assert d.memory.fallback_since == at(100)
    assert d.requeue_after == pytest.approx(60)


def test_fallback_activates_after_the_window() -> None:
    mem = replace(stable(), fallback_since=at(100))
    d = decide(want("a", fallback=STANDBY), seen(ollama=True, a=pending()), mem, at(160))
    assert d.backend == "ollama"
    assert reasons(d) == ["FallbackActivated"]
    assert d.serving_ready


def test_fallback_waits_for_a_ready_ollama() -> None:
    mem = replace(stable(), fallback_since=at(100))
    d = decide(want("a", fallback=STANDBY), seen(ollama=False, a=pending()), mem, at(200))
    assert d.backend == "vllm"
    assert d.events == ()


def test_fallback_stays_while_vllm_is_unready() -> None:
    mem = replace(stable(), backend="ollama", fallback_since=at(100), vllm_ready_since=at(150))
    d = decide(want("a", fallback=STANDBY), seen(ollama=True, a=pending()), mem, at(300))
    assert d.backend == "ollama"
    assert d.memory.vllm_ready_since is None


def test_recovery_waits_for_the_recover_window() -> None:
    mem = replace(stable(), backend="ollama", fallback_since=at(100))
    d = decide(want("a", fallback=STANDBY), seen(ollama=True, a=ready()), mem, at(300))
    assert d.backend == "ollama"
    assert d.memory.vllm_ready_since == at(300)
    assert d.requeue_after == pytest.approx(120)


def test_recovery_moves_traffic_back() -> None:
    mem = replace(stable(), backend="ollama", fallback_since=at(100), vllm_ready_since=at(300))
    d = decide(want("a", fallback=STANDBY), seen(ollama=True, a=ready()), mem, at(420))
    assert d.backend == "vllm"
    assert reasons(d) == ["FallbackRecovered"]
    assert d.memory.fallback_since is None


def test_without_fallback_traffic_stays_on_vllm() -> None:
    d = decide(want("a"), seen(a=pending()), stable(), at(1000))
    assert d.backend == "vllm"
    assert d.events == ()
    assert d.ollama_replicas == 0


def test_on_demand_ollama_runs_only_once_vllm_falters() -> None:
    healthy = decide(want("a", fallback=ON_DEMAND), seen(a=ready()), stable(), at(10))
    assert healthy.ollama_replicas == 0
    faltering = decide(want("a", fallback=ON_DEMAND), seen(a=pending()), stable(), at(10))
    assert faltering.ollama_replicas == 1
    standby = decide(want("a", fallback=STANDBY), seen(a=ready()), stable(), at(10))
    assert standby.ollama_replicas == 1


# ---- model switch: blue/green -------------------------------------------------------------------


def test_switch_starts_the_new_revision_beside_the_old() -> None:
    d = decide(want("b"), seen(a=ready()), stable("a"), at(10))
    assert reasons(d) == ["RolloutStarted"]
    assert d.deployments == {"a": 1, "b": 1}
    assert (d.backend, d.revision) == ("vllm", "a")
    assert d.memory.rollout.from_revision == "a"


def test_switch_moves_traffic_once_the_new_revision_is_ready() -> None:
    started = decide(want("b"), seen(a=ready()), stable("a"), at(10)).memory
    d = decide(want("b"), seen(a=ready(), b=ready(), endpoints=("a",)), started, at(20))
    assert reasons(d) == ["RolloutSucceeded"]
    assert d.revision == "b"
    assert d.memory.active_revision == "b"
    # Traffic moved first; the old revision drains before it goes.
    assert d.deployments == {"b": 1, "a": 1}
    assert d.memory.draining == {"a": at(20)}
    listed = decide(want("b"), seen(a=ready(), b=ready(), endpoints=("b",)), d.memory, at(21))
    assert listed.deployments == {"b": 1, "a": 1}
    assert listed.requeue_after == pytest.approx(14)
    gone = decide(want("b"), seen(a=ready(), b=ready(), endpoints=("b",)), listed.memory, at(35))
    assert gone.deployments == {"b": 1}
    assert gone.memory.draining == {}


def test_switch_waits_for_every_replica() -> None:
    started = decide(want("b", n=2), seen(a=ready(2)), stable("a"), at(10)).memory
    d = decide(want("b", n=2), seen(a=ready(2), b=RevisionObservation(replicas=2, ready=1)), started, at(20))
    assert d.revision == "a"
    assert d.memory.rollout.in_progress


def test_failing_revision_is_rolled_back_at_once() -> None:
    started = decide(want("b"), seen(a=ready()), stable("a"), at(10)).memory
    d = decide(want("b"), seen(a=ready(), b=pending(failure="container vllm was OOMKilled")), started, at(20))
    assert reasons(d) == ["RolloutRolledBack"]
    assert d.deployments == {"a": 1}
    assert d.revision == "a"
    assert d.memory.rollout.result == "RolledBack"


def test_slow_revision_is_rolled_back_after_the_timeout() -> None:
    started = decide(want("b"), seen(a=ready()), stable("a"), at(10)).memory
    early = decide(want("b"), seen(a=ready(), b=pending()), started, at(300))
    assert early.memory.rollout.in_progress
    assert early.requeue_after == pytest.approx(310)
    d = decide(want("b"), seen(a=ready(), b=pending()), started, at(611))
    assert reasons(d) == ["RolloutRolledBack"]
    assert "not ready within 600s" in (d.memory.rollout.message or "")


def test_rolled_back_revision_is_not_retried_until_the_spec_changes() -> None:
    started = decide(want("b"), seen(a=ready()), stable("a"), at(10)).memory
    rolled = decide(want("b"), seen(a=ready(), b=pending(failure="x")), started, at(20)).memory
    again = decide(want("b"), seen(a=ready()), rolled, at(30))
    assert again.deployments == {"a": 1}
    assert again.events == ()
    fixed = decide(want("c"), seen(a=ready()), rolled, at(40))
    assert reasons(fixed) == ["RolloutStarted"]
    assert fixed.deployments == {"a": 1, "c": 1}


def test_spec_change_mid_rollout_abandons_the_unfinished_revision() -> None:
    started = decide(want("b"), seen(a=ready()), stable("a"), at(10)).memory
    d = decide(want("c"), seen(a=ready(), b=pending()), started, at(20))
    assert d.deployments == {"a": 1, "c": 1}
    assert d.memory.rollout.to_revision == "c"


def test_spec_back_to_the_serving_revision_ends_the_rollout() -> None:
    started = decide(want("b"), seen(a=ready()), stable("a"), at(10)).memory
    d = decide(want("a"), seen(a=ready(), b=pending()), started, at(20))
    assert d.deployments == {"a": 1}
    assert d.memory.rollout.result == "RolledBack"
    assert "spec returned to revision a" in (d.memory.rollout.message or "")


def test_old_revision_unready_mid_rollout_falls_back() -> None:
    started = decide(want("b", fallback=STANDBY), seen(ollama=True, a=ready()), stable("a"), at(10)).memory
    mem = replace(started, fallback_since=at(10))
    d = decide(want("b", fallback=STANDBY), seen(ollama=True, a=pending(), b=pending()), mem, at(80))
    assert d.backend == "ollama"


# ---- model switch: Auto bridging through Ollama --------------------------------------------------


def short() -> RevisionObservation:
    return pending(unschedulable="0/6 nodes: 4 Insufficient nvidia.com/gpu", gpu_shortage=True)


def test_auto_bridges_when_the_gpus_are_held() -> None:
    started = decide(want("b", "Auto", STANDBY), seen(True, a=ready()), stable("a"), at(10)).memory
    d = decide(want("b", "Auto", STANDBY), seen(True, a=ready(), b=short()), started, at(20))
    assert "RolloutBridging" in reasons(d)
    assert d.memory.rollout.state == "Bridging"
    assert d.backend == "ollama"
    assert d.deployments == {"a": 1, "b": 1}  # the old revision drains before its GPUs are freed
    drained = decide(want("b", "Auto", STANDBY), seen(True, ("ollama",), a=ready(), b=short()), d.memory, at(35))
    assert drained.deployments == {"a": 0, "b": 1}
    assert drained.backend == "ollama"


def test_bridge_waits_for_ollama_before_freeing_gpus() -> None:
    started = decide(want("b", "Auto", ON_DEMAND), seen(False, a=ready()), stable("a"), at(10)).memory
    d = decide(want("b", "Auto", ON_DEMAND), seen(False, a=ready(), b=short()), started, at(20))
    assert d.deployments == {"a": 1, "b": 1}
    assert d.backend == "vllm"
    assert d.ollama_replicas == 1


def test_bridge_completes_on_the_new_revision() -> None:
    started = decide(want("b", "Auto", STANDBY), seen(True, a=ready()), stable("a"), at(10)).memory
    bridging = decide(want("b", "Auto", STANDBY), seen(True, a=ready(), b=short()), started, at(20)).memory
    d = decide(want("b", "Auto", STANDBY), seen(True, a=RevisionObservation(0, 0), b=ready()), bridging, at(30))
    assert reasons(d) == ["RolloutSucceeded"]
    assert (d.backend, d.revision) == ("vllm", "b")
    assert d.deployments == {"b": 1}


def test_failed_bridge_restores_the_old_revision_behind_ollama() -> None:
    started = decide(want("b", "Auto", STANDBY), seen(True, a=ready()), stable("a"), at(10)).memory
    bridging = decide(want("b", "Auto", STANDBY), seen(True, a=ready(), b=short()), started, at(20)).memory
    d = decide(want("b", "Auto", STANDBY), seen(True, ("ollama",), b=pending(failure="crash")), bridging, at(30))
    assert reasons(d) == ["RolloutRolledBack"]
    assert d.memory.rollout.state == "RollingBack"
    assert d.deployments == {"a": 1}
    assert d.backend == "ollama"
    restored = decide(want("b", "Auto", STANDBY), seen(True, a=ready()), d.memory, at(40))
    assert (restored.backend, restored.revision) == ("vllm", "a")
    assert restored.memory.rollout.state == "Idle"


def test_auto_without_fallback_waits_like_blue_green() -> None:
    started = decide(want("b", "Auto"), seen(a=ready()), stable("a"), at(10)).memory
    d = decide(want("b", "Auto"), seen(a=ready(), b=short()), started, at(20))
    assert d.deployments == {"a": 1, "b": 1}
    assert d.revision == "a"
    assert d.memory.rollout.state == "Deploying"


# ---- model switch: Recreate -----------------------------------------------------------------------


def test_recreate_stops_the_old_revision_first() -> None:
    d = decide(want("b", "Recreate"), seen(a=ready()), stable("a"), at(10))
    assert (d.backend, d.revision) == ("vllm", "b")
    assert d.deployments == {"a": 1, "b": 1}  # requests in flight on the old revision finish first
    stopped = decide(want("b", "Recreate"), seen(a=ready(), b=pending()), d.memory, at(25))
    assert stopped.deployments == {"a": 0, "b": 1}


def test_recreate_with_fallback_serves_ollama_meanwhile() -> None:
    not_yet = decide(want("b", "Recreate", ON_DEMAND), seen(False, a=ready()), stable("a"), at(10))
    assert not_yet.deployments == {"a": 1}
    assert not_yet.ollama_replicas == 1
    d = decide(want("b", "Recreate", ON_DEMAND), seen(True, a=ready()), not_yet.memory, at(20))
    assert d.backend == "ollama"
    assert d.deployments == {"a": 1, "b": 1}  # drains first
    later = decide(want("b", "Recreate", ON_DEMAND), seen(True, ("ollama",), a=ready()), d.memory, at(40))
    assert later.deployments == {"a": 0, "b": 1}
    # Ollama briefly unready while the new revision loads: the new revision is not touched, the old stays down.
    blip = decide(want("b", "Recreate", ON_DEMAND), seen(False, b=pending()), later.memory, at(50))
    assert blip.deployments == {"a": 0, "b": 1}
    assert blip.backend == "ollama"


def test_recreate_completes_and_failure_recreates_the_old_revision() -> None:
    started = decide(want("b", "Recreate"), seen(a=ready()), stable("a"), at(10)).memory
    done = decide(want("b", "Recreate"), seen(b=ready()), started, at(20))
    assert reasons(done) == ["RolloutSucceeded"]
    failed = decide(want("b", "Recreate"), seen(b=pending(failure="crash")), started, at(20))
    assert failed.deployments["a"] == 1
    assert (failed.backend, failed.revision) == ("vllm", "a")
    assert failed.memory.rollout.state == "RollingBack"
