"""Random walks of the rollout state machine over a simulated cluster, checking its safety invariants.

Each step the simulated world changes (pods become ready or fail, GPUs run short, Ollama blips, the spec
changes, time passes, the Service's endpoints lag, status is lost), the state machine decides, and the
decision is applied to the world as the reconcile would apply it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_operator.controller.rollout import (
    OLLAMA,
    Decision,
    Desired,
    FallbackPolicy,
    Memory,
    Observed,
    RevisionObservation,
    decide,
)
from inference_operator.controller.state import read_memory

T0 = datetime(2026, 1, 1, tzinfo=UTC)
REVISIONS = ("a", "b", "c")


@dataclass
class World:
    replicas: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    short: set[str] = field(default_factory=set)
    created: dict[str, datetime] = field(default_factory=dict)
    rollout_start: dict[str, datetime] = field(default_factory=dict)
    generation_of: dict[str, int] = field(default_factory=dict)  # the spec generation a Deployment was applied for
    ollama_replicas: int = 0
    ollama_ready: bool = False
    serving: str | None = None  # what the stable Service selects
    active_annotation: str | None = None
    rolled_back: str | None = None
    endpoints: frozenset[str] = frozenset()

    def observed(self) -> Observed:
        return Observed(
            revisions={
                r: RevisionObservation(
                    replicas=n,
                    ready=min(self.ready.get(r, 0), n),
                    failure="crash loop" if r in self.failing else None,
                    unschedulable="Insufficient nvidia.com/gpu" if r in self.short else None,
                    gpu_shortage=r in self.short,
                )
                for r, n in self.replicas.items()
            },
            ollama_ready=self.ollama_ready and self.ollama_replicas > 0,
            ollama_replicas=self.ollama_replicas,
            endpoints=self.endpoints,
        )

    def backend_ready(self, key: str | None) -> bool:
        if key == OLLAMA:
            return self.ollama_ready and self.ollama_replicas > 0
        return key is not None and min(self.ready.get(key, 0), self.replicas.get(key, 0)) >= 1

    def service(self) -> dict[str, Any] | None:
        if self.serving is None:
            return None
        if self.serving == OLLAMA:
            selector = {"inference-operator.dev/role": "ollama"}
        else:
            selector = {"inference-operator.dev/role": "vllm", "inference-operator.dev/revision": self.serving}
        annotations = {
            "inference-operator.dev/active-revision": self.active_annotation or "",
            "inference-operator.dev/rolled-back-revision": self.rolled_back or "",
        }
        return {"metadata": {"name": "s", "annotations": annotations}, "spec": {"selector": selector}}

    def deployments(self) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {
                    "labels": {"inference-operator.dev/role": "vllm", "inference-operator.dev/revision": r},
                    "creationTimestamp": self.created[r].strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "annotations": self.annotations(r),
                },
                "spec": {"replicas": n},
            }
            for r, n in self.replicas.items()
        ]

    def annotations(self, rev: str) -> dict[str, str]:
        out = {"inference-operator.dev/generation": str(self.generation_of.get(rev, 0))}
        if rev in self.rollout_start:
            out["inference-operator.dev/rollout-start"] = self.rollout_start[rev].strftime("%Y-%m-%dT%H:%M:%SZ")
        return out

    def apply(self, d: Decision, desired: Desired, generation: int, now: datetime) -> None:
        for r in list(self.replicas):
            if r not in d.deployments:
                del self.replicas[r]
                self.ready.pop(r, None)
        for r, n in d.deployments.items():
            if r not in self.replicas:
                self.created[r] = now
            self.replicas[r] = n
        if desired.revision in d.deployments:
            self.generation_of[desired.revision] = generation  # the reconcile applies the target with it
        rollout = d.memory.rollout
        if rollout.in_progress and rollout.to_revision in d.deployments and rollout.start_time is not None:
            self.rollout_start[rollout.to_revision] = rollout.start_time  # as the reconcile annotates it
        self.ollama_replicas = d.ollama_replicas
        self.serving = d.serving
        self.active_annotation = d.memory.active_revision
        self.rolled_back = rollout.to_revision if rollout.result in ("RolledBack", "Failed") else None


def check(world: World, before: World, d: Decision, desired: Desired, intact: Decision | None) -> None:
    """`intact` is the decision the same step would have made had status not been lost (None: it was not)."""
    # The Service never selects an absent or scaled-down backend.
    if d.backend == "vllm":
        assert d.deployments.get(d.revision, 0) > 0, d
    else:
        assert d.ollama_replicas > 0, d
    # The target of a rollout in progress is never deleted.
    rollout = d.memory.rollout
    if rollout.in_progress and rollout.to_revision in before.replicas:
        assert rollout.to_revision in d.deployments, d
    # Traffic moves first: a backend is not scaled down in the decision that moves traffic off it.
    if before.serving is not None and before.serving != d.serving:
        if before.serving == OLLAMA:
            assert d.ollama_replicas >= before.ollama_replicas, d
        elif before.replicas.get(before.serving, 0) > 0:
            assert d.deployments.get(before.serving, 0) >= before.replicas[before.serving], d
    # BlueGreen never scales the serving revision down before the switch.
    if desired.strategy == "BlueGreen" and before.serving not in (None, OLLAMA) and d.serving == before.serving:
        assert d.deployments.get(before.serving, 0) >= min(before.replicas.get(before.serving, 0), desired.replicas)
    # A ready vLLM is never swapped for an unready Ollama.
    if before.serving not in (None, OLLAMA) and before.backend_ready(before.serving) and d.backend == "ollama":
        assert world.ollama_ready, d
        assert world.ollama_replicas > 0, d
    # Lost status never takes traffic from a ready backend to an unready one where intact status would not.
    # (It may start a timer again: a fallback between two unready backends can come later, never earlier.)
    moved = intact is not None and d.serving not in (before.serving, intact.serving)
    if moved and before.serving is not None and before.backend_ready(before.serving):
        assert d.serving_ready, (d, intact)
    # No state waits without a bound.
    if rollout.in_progress or rollout.state == "RollingBack":
        assert d.requeue_after is not None, d


def snapshot(world: World) -> World:
    return World(
        replicas=dict(world.replicas),
        ready=dict(world.ready),
        failing=set(world.failing),
        short=set(world.short),
        created=dict(world.created),
        generation_of=dict(world.generation_of),
        rollout_start=dict(world.rollout_start),
        ollama_replicas=world.ollama_replicas,
        ollama_ready=world.ollama_ready,
        serving=world.serving,
        active_annotation=world.active_annotation,
        rolled_back=world.rolled_back,
        endpoints=world.endpoints,
    )


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    strategy=st.sampled_from(["Auto", "BlueGreen", "Recreate"]),
    fallback=st.sampled_from([None, "Standby", "OnDemand"]),
    replicas=st.integers(1, 2),
)
def test_random_walks_keep_the_safety_invariants(
    data: st.DataObject, strategy: str, fallback: str | None, replicas: int
) -> None:
    policy = None if fallback is None else FallbackPolicy(mode=fallback, activate_after=30, recover_after=60)  # type: ignore[arg-type]
    world = World()
    memory = Memory()
    now = T0
    target = "a"
    generation = 1
    for _ in range(40):
        # The world moves.
        if data.draw(st.integers(0, 9)) == 0:
            target = data.draw(st.sampled_from(REVISIONS))
            generation += 1
        for r, n in world.replicas.items():
            world.ready[r] = data.draw(st.integers(0, n))
        world.failing = {r for r in world.replicas if data.draw(st.integers(0, 9)) == 0}
        world.short = {r for r in world.replicas if world.ready.get(r, 0) == 0 and data.draw(st.booleans())}
        world.ollama_ready = world.ollama_replicas > 0 and data.draw(st.integers(0, 3)) > 0
        if data.draw(st.booleans()):  # the EndpointSlices catch up with the Service, or lag a step
            serving = world.serving
            world.endpoints = (
                frozenset({serving}) if serving is not None and world.backend_ready(serving) else frozenset()
            )
        now += timedelta(seconds=data.draw(st.sampled_from([0, 1, 5, 20, 100, 700])))
        lost = data.draw(st.integers(0, 7)) == 0
        desired = Desired(
            revision=target,
            replicas=replicas,
            strategy=strategy,  # type: ignore[arg-type]
            timeout=600,
            fallback=policy,
            drain_seconds=15,
        )
        intact = None
        if lost:
            intact = decide(desired, world.observed(), memory, now)
            memory = read_memory({}, world.service(), world.deployments(), target, strategy, now, generation)
        before = snapshot(world)
        decision = decide(desired, world.observed(), memory, now)
        check(world, before, decision, desired, intact)
        world.apply(decision, desired, generation, now)
        memory = decision.memory
