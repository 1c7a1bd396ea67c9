"""Throughput of the pure layers: plans and full renders per second over the examples.

.venv/bin/python bench/planner_bench.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import yaml

from inference_operator.api import InferenceServer
from inference_operator.planner import ClusterFacts, FlagCatalog, load_flag_catalog, plan
from inference_operator.render import objects
from inference_operator.render.objects import forget_renders

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FACTS = ClusterFacts(gpu_memory_gib=80.0, gpu_memory_source="bench", max_gpus_per_node=8)


def render_from_scratch(server: InferenceServer, catalog: FlagCatalog) -> list[dict[str, Any]]:
    forget_renders()
    return objects(plan(server, catalog, FACTS))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    servers = [InferenceServer.model_validate(yaml.safe_load(p.read_text())) for p in sorted(EXAMPLES.glob("*.yaml"))]
    catalog = load_flag_catalog()
    for label, work in (
        ("plan", lambda s: plan(s, catalog, FACTS)),
        ("plan+render", lambda s: objects(plan(s, catalog, FACTS))),
        ("  from scratch", lambda s: render_from_scratch(s, catalog)),
    ):
        count, start = 0, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            for s in servers:
                work(s)
                count += 1
        elapsed = time.perf_counter() - start
        per_call_ms = elapsed / count * 1e3
        print(f"{label:12s} {count / elapsed:10.0f}/s   {per_call_ms:7.3f} ms each  ({len(servers)} examples)")


if __name__ == "__main__":
    main()
