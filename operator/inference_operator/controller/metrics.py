"""Prometheus metrics of the operator."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry()
PREFIX = "inference_operator"

RECONCILES = Counter(f"{PREFIX}_reconciles_total", "Reconciles run, by result.", ["result"], registry=REGISTRY)
RECONCILE_ERRORS = Counter(f"{PREFIX}_reconcile_errors_total", "Reconciles that raised.", registry=REGISTRY)
RECONCILE_SECONDS = Histogram(
    f"{PREFIX}_reconcile_duration_seconds",
    "Time one reconcile takes.",
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
FINE_BUCKETS = (0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1, 2.5, 10)
NOOP_RECONCILE_SECONDS = Histogram(
    f"{PREFIX}_noop_reconcile_duration_seconds",
    "Time of the reconciles that sent no write request (the cost of a resync).",
    registry=REGISTRY,
    buckets=FINE_BUCKETS,
)
NOOP_RECONCILE_READS = Counter(
    f"{PREFIX}_noop_reconcile_api_reads_total",
    "Read requests sent by the reconciles that sent no write request.",
    registry=REGISTRY,
)
QUEUE_WAIT_SECONDS = Histogram(
    f"{PREFIX}_queue_wait_seconds",
    "Time from a reconcile being due to its start, by why it was requested.",
    ["priority"],
    registry=REGISTRY,
    buckets=FINE_BUCKETS,
)
QUEUE_DEPTH = Gauge(f"{PREFIX}_queue_depth", "Servers waiting for a reconcile.", registry=REGISTRY)
CACHED_OBJECTS = Gauge(
    f"{PREFIX}_cached_objects", "Objects in the watch-fed caches, by kind.", ["kind"], registry=REGISTRY
)
API_WRITES = Counter(
    f"{PREFIX}_api_writes_total",
    "Write requests sent to the API server, by verb and resource.",
    ["verb", "resource"],
    registry=REGISTRY,
)
API_READS = Counter(
    f"{PREFIX}_api_reads_total", "Read requests sent to the API server, by resource.", ["resource"], registry=REGISTRY
)
ROLLOUTS = Counter(
    f"{PREFIX}_rollouts_total", "Finished rollouts, by strategy and result.", ["strategy", "result"], registry=REGISTRY
)
ROLLOUT_SECONDS = Histogram(
    f"{PREFIX}_rollout_duration_seconds",
    "Duration of finished rollouts.",
    registry=REGISTRY,
    buckets=(5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200),
)
FAILOVERS = Counter(
    f"{PREFIX}_failovers_total",
    "Traffic switches between vLLM and Ollama, by target backend.",
    ["to"],
    registry=REGISTRY,
)
RESYNCS = Counter(f"{PREFIX}_resyncs_total", "Full resyncs of every known server.", registry=REGISTRY)
SERVERS = Gauge(f"{PREFIX}_servers", "InferenceServers known to the operator.", registry=REGISTRY)
LEADER = Gauge(f"{PREFIX}_leader", "1 while this replica holds leadership.", registry=REGISTRY)


@dataclass
class Requests:
    reads: int = 0
    writes: int = 0


_REQUESTS: ContextVar[Requests | None] = ContextVar("inference_operator_requests", default=None)


@contextmanager
def counting_requests() -> Iterator[Requests]:
    """Count the API requests sent by the code run inside (one reconcile: its task's own context)."""
    counted = Requests()
    token = _REQUESTS.set(counted)
    try:
        yield counted
    finally:
        _REQUESTS.reset(token)


def count_request(method: str) -> None:
    counted = _REQUESTS.get()
    if counted is None:
        return
    if method == "GET":
        counted.reads += 1
    else:
        counted.writes += 1


def serve(address: str) -> None:
    host, _, port = address.rpartition(":")
    start_http_server(int(port), addr=host or "0.0.0.0", registry=REGISTRY)
