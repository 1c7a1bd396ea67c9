"""The rollout and fallback state machine (pure).

Given the desired revision, what the cluster shows and what the last reconcile persisted in status,
decide which vLLM revisions run with how many replicas, where the stable Service points, whether
Ollama runs, what to persist, which Events to post and when to look again. The Service always
selects exactly one backend: one vLLM revision or Ollama.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from ..api.status import RolloutResult, RolloutStatus

Backend = Literal["vllm", "ollama"]
OLLAMA = "ollama"  # the backend key of the Ollama fallback; vLLM backends are keyed by their revision
Rollout = RolloutStatus


@dataclass(frozen=True)
class RevisionObservation:
    replicas: int
    ready: int
    failure: str | None = None  # crash loop, OOMKilled, image pull: the revision cannot become ready
    failure_reason: str | None = None  # Kubernetes' own word for it: CrashLoopBackOff, OOMKilled, ...
    unschedulable: str | None = None  # a pod waits for a node
    gpu_shortage: bool = False  # ... because GPUs are short


@dataclass(frozen=True)
class Observed:
    revisions: Mapping[str, RevisionObservation]
    ollama_ready: bool = False
    ollama_replicas: int = 0
    endpoints: frozenset[str] = frozenset()  # backends the stable Service's EndpointSlices list as ready


@dataclass(frozen=True)
class FallbackPolicy:
    mode: Literal["Standby", "OnDemand"]
    activate_after: float
    recover_after: float


@dataclass(frozen=True)
class Desired:
    revision: str
    replicas: int
    strategy: Literal["Auto", "BlueGreen", "Recreate"]
    timeout: float
    fallback: FallbackPolicy | None
    drain_seconds: float = 15.0


@dataclass(frozen=True)
class Memory:
    """What one reconcile hands the next: read from the cluster where it lives there, timers from status.

    `active_revision`, `backend` and `serving` come from the stable Service (its selector and annotations);
    the rollout record and the timers are status, a cache that may be lost without moving traffic.
    """

    active_revision: str | None = None
    backend: Backend | None = None
    rollout: Rollout = field(default_factory=Rollout)
    fallback_since: datetime | None = None  # when the serving vLLM revision lost its last ready replica
    vllm_ready_since: datetime | None = None  # when it had a ready replica again, while Ollama serves
    serving: str | None = None  # the backend the Service selects now: a revision, or OLLAMA
    draining: Mapping[str, datetime] = field(default_factory=dict)  # backend -> when traffic left it


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Decision:
    deployments: dict[str, int]  # revision -> replicas; revisions not listed are deleted
    backend: Backend
    revision: str  # the vLLM revision the Service selects when backend is vllm
    ollama_replicas: int
    memory: Memory
    events: tuple[Event, ...]
    requeue_after: float | None
    serving_ready: bool  # the backend the Service selects has a ready replica

    @property
    def serving(self) -> str:
        return OLLAMA if self.backend == "ollama" else self.revision


def _ready(obs: RevisionObservation | None, replicas: int) -> bool:
    return obs is not None and obs.ready >= max(1, replicas)


def _any_ready(obs: RevisionObservation | None) -> bool:
    return obs is not None and obs.ready >= 1


class _Builder:
    """Accumulates one decision; each rollout phase below fills it in."""

    def __init__(self, desired: Desired, observed: Observed, memory: Memory, now: datetime) -> None:
        self.d = desired
        self.o = observed
        self.m = memory
        self.now = now
        self.events: list[Event] = []
        self.wakeups: list[float] = []

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(Event(type_, reason, message))

    def wake_in(self, seconds: float) -> None:
        self.wakeups.append(max(1.0, seconds))

    def elapsed(self, since: datetime | None) -> float:
        return 0.0 if since is None else (self.now - since).total_seconds()

    def timed_out(self, since: datetime | None) -> bool:
        if since is None:
            return False
        left = self.d.timeout - self.elapsed(since)
        if left > 0:
            self.wake_in(left)
        return left <= 0

    def rollout_timed_out(self) -> bool:
        return self.timed_out(self.m.rollout.start_time)


def _start(b: _Builder, from_rev: str | None, to_rev: str) -> Memory:
    b.event(
        "Normal",
        "RolloutStarted",
        f"rolling out revision {to_rev}" + (f" over {from_rev}" if from_rev else "") + f" ({b.d.strategy})",
    )
    return replace(
        b.m,
        rollout=Rollout(
            state="Deploying",
            strategy=b.d.strategy,
            from_revision=from_rev,
            to_revision=to_rev,
            start_time=b.now,
            result="InProgress",
        ),
    )


def _with_rollout(mem: Memory, **changes: Any) -> Memory:
    return replace(mem, rollout=mem.rollout.model_copy(update=changes))


def _finish(b: _Builder, mem: Memory, result: RolloutResult, message: str, *, active: str | None) -> Memory:
    mem = _with_rollout(mem, state="Idle", end_time=b.now, result=result, message=message)
    if result == "Succeeded":
        b.event("Normal", "RolloutSucceeded", message)
        return replace(mem, active_revision=active, backend="vllm", fallback_since=None, vllm_ready_since=None)
    b.event("Warning", "RolloutRolledBack" if result == "RolledBack" else "RolloutFailed", message)
    return replace(mem, active_revision=active)


def _failure_reason(b: _Builder, rev: str) -> str | None:
    obs = b.o.revisions.get(rev)
    if obs is not None and obs.failure:
        return f"revision {rev} failed: {obs.failure}"
    if b.rollout_timed_out():
        detail = f": {obs.unschedulable}" if obs is not None and obs.unschedulable else ""
        return f"revision {rev} was not ready within {b.d.timeout:.0f}s{detail}"
    return None


def _apply_fallback(b: _Builder, mem: Memory, serving: str) -> tuple[Memory, Backend]:
    """Moves traffic between the serving vLLM revision and Ollama by their readiness over time."""
    policy = b.d.fallback
    healthy = _any_ready(b.o.revisions.get(serving))
    backend: Backend = mem.backend or "vllm"
    if policy is None:
        return replace(mem, backend="vllm", fallback_since=None, vllm_ready_since=None), "vllm"
    if backend == "vllm":
        if healthy:
            return replace(mem, backend="vllm", fallback_since=None, vllm_ready_since=None), "vllm"
        since = mem.fallback_since or b.now
        waited = b.elapsed(since)
        if waited >= policy.activate_after and b.o.ollama_ready:
            b.event(
                "Warning",
                "FallbackActivated",
                f"no ready vLLM replica for {waited:.0f}s: traffic moved to the Ollama fallback",
            )
            return replace(mem, backend="ollama", fallback_since=since, vllm_ready_since=None), "ollama"
        if waited < policy.activate_after:
            b.wake_in(policy.activate_after - waited)
        return replace(mem, backend="vllm", fallback_since=since, vllm_ready_since=None), "vllm"
    # Ollama serves: go back once vLLM has stayed ready long enough.
    if not healthy:
        return replace(mem, vllm_ready_since=None), "ollama"
    since = mem.vllm_ready_since or b.now
    waited = b.elapsed(since)
    if waited >= policy.recover_after:
        b.event("Normal", "FallbackRecovered", f"vLLM ready for {waited:.0f}s: traffic moved back to vLLM")
        return replace(mem, backend="vllm", fallback_since=None, vllm_ready_since=None), "vllm"
    b.wake_in(policy.recover_after - waited)
    return replace(mem, vllm_ready_since=since), "ollama"


def _ollama_replicas(b: _Builder, mem: Memory, backend: Backend, bridging: bool) -> int:
    policy = b.d.fallback
    if policy is None:
        return 0
    if policy.mode == "Standby" or backend == "ollama" or bridging or mem.fallback_since is not None:
        return 1
    return 0


def _stopped_old(state: str) -> bool:
    """The rollout has scaled the old revision down for the new one (Auto's bridge, or Recreate)."""
    return state in ("Bridging", "Switching")


def decide(desired: Desired, observed: Observed, memory: Memory, now: datetime) -> Decision:
    b = _Builder(desired, observed, memory, now)
    target = desired.revision
    active = memory.active_revision
    mem = memory
    n = desired.replicas
    first_answers = memory.serving not in (None, OLLAMA, target) and _any_ready(
        observed.revisions.get(memory.serving or "")
    )
    if active is None and first_answers:
        # The first revision never became fully ready, but it answers: it serves until the next one is ready.
        active = memory.serving
        mem = b.m = replace(mem, active_revision=active, backend="vllm")

    # A revision the spec asks for again after it failed is not retried until the spec changes.
    failed_before = (
        mem.rollout.to_revision == target and mem.rollout.result in ("RolledBack", "Failed") and active != target
    )

    if active is not None and mem.rollout.state == "RollingBack" and target in (active, mem.rollout.to_revision):
        # The old revision comes back after a failed bridge or recreate; Ollama serves meanwhile.
        if _any_ready(observed.revisions.get(active)):
            mem = _with_rollout(mem, state="Idle")
            return _decision(b, {active: n}, "vllm", active, replace(mem, backend="vllm"), bridging=False)
        if b.timed_out(mem.rollout.end_time):
            mem = _with_rollout(mem, state="Idle", result="Failed")
            b.event(
                "Warning",
                "RollbackFailed",
                f"revision {active} did not come back within {desired.timeout:.0f}s after the rollback",
            )
        backend: Backend = "ollama" if desired.fallback and (observed.ollama_ready or mem.serving == OLLAMA) else "vllm"
        return _decision(b, {active: n}, backend, active, replace(mem, backend=backend), bridging=True)

    if active is None:
        # First deployment: nothing to roll back to, so a failed revision keeps trying.
        if mem.rollout.to_revision != target:
            mem = _start(b, None, target)
            b.m = mem
        if _ready(observed.revisions.get(target), n):
            mem = _finish(b, mem, "Succeeded", f"revision {target} is ready", active=target)
            return _decision(b, {target: n}, "vllm", target, mem, bridging=False)
        if mem.rollout.in_progress:
            reason = _failure_reason(b, target)
            if reason:
                mem = _finish(b, mem, "Failed", reason, active=None)
        mem, backend = _apply_fallback(b, mem, target)
        return _decision(b, {target: n}, backend, target, mem, bridging=False)

    if target == active or failed_before:
        if mem.rollout.in_progress and mem.rollout.to_revision != active:
            # The spec went back to the serving revision mid-rollout: abandon the new one.
            mem = _finish(b, mem, "RolledBack", f"spec returned to revision {active}", active=active)
        mem, backend = _apply_fallback(b, mem, active)
        return _decision(b, {active: n}, backend, active, mem, bridging=False)

    # A model switch: active -> target.
    if not (mem.rollout.in_progress and mem.rollout.to_revision == target):
        mem = _start(b, active, target)
        b.m = mem
    state = mem.rollout.state
    obs_new = observed.revisions.get(target)

    if _ready(obs_new, n):
        mem = _finish(b, mem, "Succeeded", f"revision {target} replaced {active}", active=target)
        return _decision(b, {target: n}, "vllm", target, mem, bridging=False)

    reason = _failure_reason(b, target)
    if reason:
        if _stopped_old(state):
            # The old revision was scaled to zero: bring it back while Ollama (if any) serves.
            mem = _finish(b, mem, "RolledBack", reason, active=active)
            mem = _with_rollout(mem, state="RollingBack")
            on_ollama = desired.fallback is not None and (observed.ollama_ready or mem.serving == OLLAMA)
            backend = "ollama" if on_ollama else "vllm"
            return _decision(b, {active: n}, backend, active, replace(mem, backend=backend), bridging=True)
        mem = _finish(b, mem, "RolledBack", reason, active=active)
        mem, backend = _apply_fallback(b, mem, active)
        return _decision(b, {active: n}, backend, active, mem, bridging=False)

    if desired.strategy == "Recreate" and not _stopped_old(state):
        if desired.fallback is not None and not observed.ollama_ready:
            # Stop the old revision only once Ollama can take the traffic (a target already there stays).
            mem, backend = _apply_fallback(b, mem, active)
            keep = {target: n} if obs_new is not None else {}
            return _decision(b, {active: n, **keep}, backend, active, mem, bridging=True)
        mem = _with_rollout(mem, state="Switching")
        state = "Switching"

    gpu_short = obs_new is not None and obs_new.gpu_shortage
    if state == "Deploying" and desired.strategy == "Auto" and gpu_short and desired.fallback is not None:
        b.event(
            "Normal",
            "RolloutBridging",
            f"revision {target} cannot be scheduled while {active} holds the GPUs: bridging with the Ollama fallback",
        )
        mem = _with_rollout(mem, state="Bridging")
        state = "Bridging"

    if _stopped_old(state):
        if desired.fallback is None:
            # Recreate without a fallback: the new revision takes the Service while it starts.
            return _decision(b, {active: 0, target: n}, "vllm", target, replace(mem, backend="vllm"), bridging=True)
        if mem.serving == OLLAMA or observed.ollama_ready:
            # Ollama took the traffic: the old revision stays down, whatever Ollama's readiness does meanwhile.
            return _decision(b, {active: 0, target: n}, "ollama", active, replace(mem, backend="ollama"), bridging=True)
        # Keep the old revision serving until Ollama can take the traffic.
        mem, backend = _apply_fallback(b, mem, active)
        return _decision(b, {active: n, target: n}, backend, active, mem, bridging=True)

    # Blue/green: the new revision starts beside the old one, which keeps serving.
    mem, backend = _apply_fallback(b, mem, active)
    return _decision(b, {active: n, target: n}, backend, active, mem, bridging=False)


def _drain(
    b: _Builder, deployments: dict[str, int], ollama_replicas: int, serving: str, serving_ready: bool
) -> tuple[dict[str, int], int, dict[str, datetime]]:
    """Traffic moves first; a backend the Service left goes only once its endpoints are gone and the window passed.

    Returns the deployments and Ollama replicas to apply now, and the drain timers to remember.
    """
    draining = {k: v for k, v in b.m.draining.items() if k != serving}
    before = b.m.serving
    if before is not None and before != serving:
        draining.setdefault(before, b.now)
    window = b.d.drain_seconds
    out = dict(deployments)
    wanted_ollama = ollama_replicas

    def hold(key: str) -> bool:
        """Whether `key`, which the decision scales down, must keep running for now."""
        if key in b.o.endpoints:
            b.wake_in(1.0)
            return True
        since = draining.pop(key, None)
        if since is None:
            ready = b.o.ollama_ready if key == OLLAMA else _any_ready(b.o.revisions.get(key))
            if not ready:
                return False  # it cannot have had traffic, or its drain is over
            # A backend that answers and has no timer (never served, or status was lost): a full window from now.
            since = draining[key] = b.now
        if serving_ready and serving not in b.o.endpoints:
            draining[key] = since
            b.wake_in(1.0)  # the new backend is not listed yet: the old one may still get the traffic
            return True
        if b.elapsed(since) < window:
            draining[key] = since
            b.wake_in(window - b.elapsed(since))
            return True
        return False

    for rev, obs in b.o.revisions.items():
        if rev == serving or obs.replicas <= out.get(rev, 0):
            continue
        if hold(rev):
            out[rev] = obs.replicas
    if serving != OLLAMA and b.o.ollama_replicas > wanted_ollama and hold(OLLAMA):
        wanted_ollama = b.o.ollama_replicas
    present = set(b.o.revisions) | ({OLLAMA} if b.o.ollama_replicas > 0 else set())
    return out, wanted_ollama, {k: v for k, v in draining.items() if k in present}


def _decision(
    b: _Builder, deployments: dict[str, int], backend: Backend, revision: str, mem: Memory, *, bridging: bool
) -> Decision:
    if mem.rollout.in_progress and b.m.rollout.start_time is not None:
        b.rollout_timed_out()  # schedules a wake-up at the deadline
    if mem.rollout.state == "RollingBack":
        b.timed_out(mem.rollout.end_time)
    ollama_replicas = _ollama_replicas(b, mem, backend, bridging)
    serving_ready = b.o.ollama_ready if backend == "ollama" else _any_ready(b.o.revisions.get(revision))
    serving = OLLAMA if backend == "ollama" else revision
    deployments, ollama_replicas, draining = _drain(b, deployments, ollama_replicas, serving, serving_ready)
    return Decision(
        deployments=deployments,
        backend=backend,
        revision=revision,
        ollama_replicas=ollama_replicas,
        memory=replace(mem, backend=backend, serving=serving, draining=draining),
        events=tuple(b.events),
        requeue_after=min(b.wakeups) if b.wakeups else None,
        serving_ready=serving_ready,
    )
