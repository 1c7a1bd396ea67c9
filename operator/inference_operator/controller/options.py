"""Command-line options of `inference-operator run` (environment variables give the defaults)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from ..planner.inputs import DEFAULT_OLLAMA_IMAGE, DEFAULT_VLLM_IMAGE


@dataclass(frozen=True)
class Options:
    namespaces: tuple[str, ...]
    kubeconfig: str | None
    vllm_image: str
    ollama_image: str
    metrics_address: str
    health_address: str
    resync_seconds: float
    max_concurrent_rollouts: int
    max_concurrent_reconciles: int
    read_nodes: bool
    leader_elect: bool
    leader_election_namespace: str | None
    lease_name: str
    lease_seconds: float
    renew_deadline_seconds: float
    retry_period_seconds: float
    log_format: str
    log_level: str

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Options:
        namespaces = tuple(n for value in args.namespace for n in value.split(",") if n)
        return cls(
            namespaces=namespaces,
            kubeconfig=args.kubeconfig,
            vllm_image=args.vllm_image,
            ollama_image=args.ollama_image,
            metrics_address=args.metrics_address,
            health_address=args.health_address,
            resync_seconds=args.resync_seconds,
            max_concurrent_rollouts=args.max_concurrent_rollouts,
            max_concurrent_reconciles=args.max_concurrent_reconciles,
            read_nodes=args.read_nodes,
            leader_elect=args.leader_elect,
            leader_election_namespace=args.leader_election_namespace,
            lease_name=args.lease_name,
            lease_seconds=args.lease_seconds,
            renew_deadline_seconds=args.renew_deadline_seconds,
            retry_period_seconds=args.retry_period_seconds,
            log_format=args.log_format,
            log_level=args.log_level,
        )


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _env_list(name: str) -> list[str]:
    value = os.environ.get(name, "")
    return [value] if value else []


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    env = os.environ.get
    p.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=_env_list("WATCH_NAMESPACES"),
        help="watch only these namespaces (repeat or comma-separate); all namespaces when unset [WATCH_NAMESPACES]",
    )
    p.add_argument("--kubeconfig", default=env("KUBECONFIG"), help="kubeconfig file; in-cluster credentials when unset")
    p.add_argument("--vllm-image", default=env("VLLM_IMAGE", DEFAULT_VLLM_IMAGE), help="default vLLM image")
    p.add_argument("--ollama-image", default=env("OLLAMA_IMAGE", DEFAULT_OLLAMA_IMAGE), help="default Ollama image")
    p.add_argument(
        "--metrics-address",
        default=env("METRICS_ADDRESS", "0.0.0.0:8080"),
        help="host:port of the Prometheus metrics endpoint",
    )
    p.add_argument(
        "--health-address",
        default=env("HEALTH_ADDRESS", "0.0.0.0:8081"),
        help="host:port of the liveness endpoint (/healthz)",
    )
    p.add_argument(
        "--resync-seconds",
        type=float,
        default=float(env("RESYNC_SECONDS", "300")),
        help="how often every server is reconciled even without changes (drift)",
    )
    p.add_argument(
        "--max-concurrent-reconciles",
        type=_positive_int,
        default=_positive_int(env("MAX_CONCURRENT_RECONCILES", "16")),
        help="how many servers are reconciled at the same time [MAX_CONCURRENT_RECONCILES]",
    )
    p.add_argument(
        "--read-nodes",
        action=argparse.BooleanOptionalAction,
        default=env("READ_NODES", "true").lower() == "true",
        help="watch nodes to size plans from GPU feature discovery labels (needs list/watch on nodes) [READ_NODES]",
    )
    p.add_argument(
        "--max-concurrent-rollouts",
        type=int,
        default=int(env("MAX_CONCURRENT_ROLLOUTS", "10")),
        help="model switches in progress at once across all servers; others wait (0: no bound) "
        "[MAX_CONCURRENT_ROLLOUTS]",
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=env("LEADER_ELECT", "false").lower() == "true",
        help="hold a Lease so that only one of several replicas acts",
    )
    p.add_argument(
        "--leader-election-namespace",
        default=env("POD_NAMESPACE"),
        help="namespace of the leader Lease (defaults to the pod's namespace)",
    )
    p.add_argument("--lease-name", default=env("LEASE_NAME", "inference-operator-leader"))
    p.add_argument(
        "--lease-seconds",
        type=float,
        default=float(env("LEASE_SECONDS", "15")),
        help="a standby takes the Lease over after it has seen no renewal for this long [LEASE_SECONDS]",
    )
    p.add_argument(
        "--renew-deadline-seconds",
        type=float,
        default=float(env("RENEW_DEADLINE_SECONDS", "10")),
        help="the leader stops acting when it could not renew the Lease for this long; "
        "shorter than --lease-seconds [RENEW_DEADLINE_SECONDS]",
    )
    p.add_argument(
        "--retry-period-seconds",
        type=float,
        default=float(env("RETRY_PERIOD_SECONDS", "2")),
        help="how often the leader renews the Lease (a standby looks twice as often) [RETRY_PERIOD_SECONDS]",
    )
    p.add_argument("--log-format", choices=["json", "plain"], default=env("LOG_FORMAT", "json"))
    p.add_argument("--log-level", choices=["debug", "info", "warning"], default=env("LOG_LEVEL", "info"))
