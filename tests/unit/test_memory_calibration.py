"""The memory estimate against the numbers vLLM itself logged for published configurations.

Each case cites the vLLM issue or pull request whose log holds the number; docs/planning.md lists the same table.
The GPU memory given to the planner is what GPU feature discovery labels the board with (the log's
total_gpu_memory plus the driver's reserve) so that the whole chain, reserve included, is checked.
"""

import re
from dataclasses import dataclass
from typing import Any

import pytest

from inference_operator.planner import ClusterFacts, PlanError, load_flag_catalog, plan
from inference_operator.planner.memory import DRIVER_RESERVED_GIB
from tests.support.examples import server

CATALOG = load_flag_catalog()
TOLERANCE = 0.10


@dataclass(frozen=True)
class Published:
    source: str
    what: str  # "weights": "Loading model weights took X GB"; "kv": KV cache GiB after profiling
    logged_gib: float
    spec: dict[str, Any]
    gpu_total_gib: float  # total_gpu_memory of the log

    def estimate(self) -> float:
        # Weights do not depend on the GPU: they are read from a plan on one large enough to accept the model.
        total = max(self.gpu_total_gib, 80.0) if self.what == "weights" else self.gpu_total_gib
        facts = ClusterFacts(
            gpu_memory_gib=total + DRIVER_RESERVED_GIB,
            gpu_memory_source=self.source,
            max_gpus_per_node=8,
        )
        p = plan(server(self.spec), CATALOG, facts)
        assert p.memory is not None
        if self.what == "weights":
            return p.memory.weights_gib
        return p.memory.available_gib - p.memory.weights_gib - p.memory.overhead_gib


def _spec(model: str, version: str, tp: int, **engine: Any) -> dict[str, Any]:
    return {
        "model": {"name": model},
        "engine": {"version": version, "tensorParallelSize": tp, **engine},
        "resources": {"gpus": tp},
    }


LLAMA31_8B_3090_20K = _spec("meta-llama/Llama-3.1-8B-Instruct", "0.6.4", 1, maxModelLen=20000)
LLAMA31_8B_3090_29K = _spec("meta-llama/Llama-3.1-8B-Instruct", "0.6.4", 1, maxModelLen=29000)
QWEN25_7B_AWQ_4060 = _spec("Qwen/Qwen2.5-7B-Instruct-AWQ", "0.7.3", 1, maxModelLen=4096, gpuMemoryUtilization=0.7)
LLAMA31_8B_3090_35K = _spec("meta-llama/Llama-3.1-8B-Instruct", "0.6.4", 1, maxModelLen=35000)

PUBLISHED = [
    # RTX 3090, vLLM 0.6.4 (V0): "Loading model weights took 14.9888 GB", and with --max-model-len 20000
    # "kv_cache_size=3.81GiB" ("Maximum concurrency for 20000 tokens per request: 1.56x").
    # https://github.com/vllm-project/vllm/issues/10517 (the 29000-token refusal is the test below)
    Published("vllm#10517", "weights", 14.9888, LLAMA31_8B_3090_20K, 23.58),
    Published("vllm#10517", "kv", 3.81, LLAMA31_8B_3090_20K, 23.58),
    # The same GPU at 35000 tokens: V0 turns on chunked prefill above 32k, so the profiling peak falls to
    # "peak_torch_memory=15.05GiB"; the KV cache is what the log's own terms leave: 23.58 x 0.9 - 15.05 - 0.35.
    Published("vllm#10517", "kv", 23.58 * 0.9 - 15.05 - 0.35, LLAMA31_8B_3090_35K, 23.58),
    # H100 80GB, vLLM 0.6.5 (V0), Meta-Llama-3-8B with defaults: "model weights take 14.96GiB",
    # "available_kv_cache_memory 53.29GiB"; with -tp 2 "model weights take 7.48GiB".
    # https://github.com/vllm-project/vllm/pull/10511
    Published("vllm#10511", "weights", 14.96, _spec("meta-llama/Meta-Llama-3-8B", "0.6.5", 1), 79.22),
    Published("vllm#10511", "kv", 53.29, _spec("meta-llama/Meta-Llama-3-8B", "0.6.5", 1), 79.22),
    Published("vllm#10511", "weights", 7.48, _spec("meta-llama/Meta-Llama-3-8B", "0.6.5", 2), 79.22),
    # RTX 4060 Laptop (8 GiB), vLLM 0.7 (V0), a 4-bit group-128 Qwen2.5-7B checkpoint at utilization 0.7 and
    # --max-model-len 4096: "Loading model weights took 5.2032 GB", then no room for the KV cache ("the rest of the
    # memory reserved for KV Cache is -1.05GiB"). https://github.com/vllm-project/vllm/issues/13882
    Published("vllm#13882", "weights", 5.2032, QWEN25_7B_AWQ_4060, 8.0),
    # 8 x 141 GB H20, vLLM 0.6.4, Meta-Llama-3.1-70B-Instruct at TP 8 and gpu_memory_utilization 0.95:
    # "total_gpu_memory=139.72GiB ... kv_cache_size=110.52GiB". https://github.com/vllm-project/vllm/issues/10702
    Published(
        "vllm#10702",
        "kv",
        110.52,
        _spec("meta-llama/Meta-Llama-3.1-70B-Instruct", "0.6.4", 8, gpuMemoryUtilization=0.95),
        139.72,
    ),
]


@pytest.mark.parametrize("case", PUBLISHED, ids=lambda c: f"{c.source}-{c.what}-{c.logged_gib}")
def test_estimate_is_within_ten_percent_of_what_vllm_logged(case: Published) -> None:
    estimate = case.estimate()
    assert abs(estimate - case.logged_gib) <= TOLERANCE * case.logged_gib, (estimate, case.logged_gib)


def test_the_published_29k_refusal_is_a_refusal_with_the_logged_kv_cache() -> None:
    # vllm#10517: at 29000 tokens "kv_cache_size=2.89GiB" holds 23648 tokens, and vLLM refuses to start.
    facts = ClusterFacts(gpu_memory_gib=23.58 + DRIVER_RESERVED_GIB, gpu_memory_source="vllm#10517")
    with pytest.raises(PlanError) as refused:
        plan(server(LLAMA31_8B_3090_29K), CATALOG, facts)
    assert refused.value.field == "spec.engine.maxModelLen"
    left = re.search(r"but ([0-9.]+) GiB is left", str(refused.value))
    assert left is not None
    assert abs(float(left.group(1)) - 2.89) <= TOLERANCE * 2.89


def test_the_published_4060_refusal_is_a_refusal() -> None:
    # vllm#13882: 8 GiB at utilization 0.7 leaves no KV cache after 5.2 GiB of 4-bit weights.
    facts = ClusterFacts(gpu_memory_gib=8.0 + DRIVER_RESERVED_GIB, gpu_memory_source="vllm#13882")
    with pytest.raises(PlanError, match=r"the model does not fit: 5\.2 GiB of weights per GPU"):
        plan(server(QWEN25_7B_AWQ_4060), CATALOG, facts)
