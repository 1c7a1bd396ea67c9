import json
from importlib import resources

import pytest

from inference_operator.planner import (
    ClusterFacts,
    Defaults,
    PlanError,
    Release,
    canonical_name,
    load_flag_catalog,
    lookup,
    plan,
)
from inference_operator.planner.inputs import DEFAULT_VLLM_IMAGE
from inference_operator.planner.memory import DRIVER_RESERVED_GIB, GIB, NON_TORCH_GIB
from inference_operator.planner.versions import release_from_image
from inference_operator.planner.vllm_args import REQUIRED_FLAGS
from tests.support.examples import server

H100 = ClusterFacts(gpu_memory_gib=80.0, gpu_memory_source="test", max_gpus_per_node=8)
CATALOG = load_flag_catalog()


def llama8b(**engine: object) -> dict[str, object]:
    return {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": {"version": "0.10.2", **engine}}


@pytest.mark.parametrize(
    ("model_id", "canonical"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("meta-llama/Meta-Llama-3.1-70B-Instruct", "llama-3.1-70b"),
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", "qwen2.5-7b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"),
        ("google/gemma-2-9b-it", "gemma-2-9b"),
        ("microsoft/phi-4", "phi-4"),
        ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "deepseek-r1-distill-llama-70b"),
    ],
)
def test_catalog_recognises_common_model_ids(model_id: str, canonical: str) -> None:
    assert canonical_name(model_id) == canonical
    assert lookup(model_id) is not None


def test_catalog_covers_the_families_asked_for() -> None:
    for name in (
        "llama-3.2-1b",
        "llama-3.1-405b",
        "mistral-7b",
        "mixtral-8x7b",
        "qwen2.5-0.5b",
        "qwen2.5-72b",
        "gemma-2-27b",
        "gemma-3-27b",
        "phi-3-mini-4k",
        "phi-4",
        "deepseek-r1-distill-qwen-32b",
    ):
        size = lookup(name)
        assert size is not None, name
        assert size.complete(), name
        assert size.attention_heads % size.kv_heads == 0, name  # type: ignore[operator]


def test_memory_estimate_follows_the_stated_formula() -> None:
    p = plan(server(llama8b(maxModelLen=8192)), CATALOG, H100)
    assert p.memory is not None
    weights = 8.03e9 * 2 / GIB
    kv_per_token = 2 * 32 * 8 * 128 * 2
    # V1 profiles one step of 8192 batched tokens on an 80 GiB GPU: (3 x hidden + 3 x intermediate) x 2 bytes each.
    activation = 8192 * (3 * 4096 + 3 * 14336) * 2 / GIB
    overhead = NON_TORCH_GIB + activation
    assert p.memory.weights_gib == pytest.approx(weights, abs=0.01)
    assert p.memory.kv_cache_per_sequence_gib == pytest.approx(kv_per_token * 8192 / GIB, abs=0.01)
    assert p.memory.overhead_gib == pytest.approx(overhead, abs=0.01)
    available = (80 - DRIVER_RESERVED_GIB) * 0.9
    assert p.memory.available_gib == pytest.approx(available, abs=0.01)
    free = available - weights - overhead
    assert p.memory.max_sequences == int(free // (kv_per_token * 8192 / GIB))


def test_kv_heads_split_over_tensor_parallel_ranks() -> None:
    one = plan(server({**llama8b(maxModelLen=8192, tensorParallelSize=1)}), CATALOG, H100)
    two = plan(server({**llama8b(maxModelLen=8192, tensorParallelSize=2)}), CATALOG, H100)
    assert one.memory
    assert two.memory
    assert two.memory.kv_cache_per_sequence_gib == pytest.approx(one.memory.kv_cache_per_sequence_gib / 2, abs=0.01)
    assert two.memory.weights_gib == pytest.approx(one.memory.weights_gib / 2, abs=0.01)


def test_auto_prefers_more_gpus_over_a_shorter_context() -> None:
    p = plan(server({**llama8b(), "resources": {"gpuMemoryGiB": 24}}), CATALOG)
    assert p.tensor_parallel_size == 2
    assert p.max_model_len == 131072


def test_auto_picks_the_smallest_tensor_parallel_size_that_fits() -> None:
    small = plan(server(llama8b()), CATALOG, H100)
    assert (small.tensor_parallel_size, small.gpus) == (1, 1)
    big = plan(
        server({"model": {"name": "meta-llama/Llama-3.3-70B-Instruct"}, "engine": {"version": "0.10.2"}}), CATALOG, H100
    )
    assert big.tensor_parallel_size == 4
    assert big.gpus == 4


def test_auto_with_gpus_set_splits_them_over_pipeline_stages() -> None:
    p = plan(server({**llama8b(pipelineParallelSize=2), "resources": {"gpus": 4}}), CATALOG, H100)
    assert (p.tensor_parallel_size, p.pipeline_parallel_size, p.gpus) == (2, 2, 4)


def test_tensor_parallel_three_on_thirty_two_heads_is_refused_with_the_reason() -> None:
    with pytest.raises(PlanError, match="tensor parallel size 3 does not divide the model's 32 attention heads") as e:
        plan(server({**llama8b(tensorParallelSize=3), "resources": {"gpus": 3}}), CATALOG, H100)
    assert e.value.field == "spec.engine.tensorParallelSize"


def test_tp_times_pp_must_equal_gpus() -> None:
    with pytest.raises(PlanError, match="not 8 GPUs") as e:
        plan(server({**llama8b(tensorParallelSize=2), "resources": {"gpus": 8}}), CATALOG, H100)
    assert e.value.field == "spec.resources.gpus"


def test_a_model_that_cannot_fit_is_refused_with_the_numbers() -> None:
    spec = {
        "model": {"name": "meta-llama/Llama-3.3-70B-Instruct"},
        "engine": {"version": "0.10.2", "tensorParallelSize": 1},
        "resources": {"gpus": 1},
    }
    with pytest.raises(PlanError, match=r"131\.\d GiB of weights per GPU .* 71\.6 GiB available"):
        plan(server(spec), CATALOG, H100)


def test_explicit_max_model_len_that_does_not_fit_is_refused() -> None:
    spec = {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "engine": {"version": "0.10.2", "maxModelLen": 131072},
        "resources": {"gpus": 1, "gpuMemoryGiB": 24},
    }
    with pytest.raises(PlanError, match="the longest that fits is") as e:
        plan(server(spec), CATALOG)
    assert e.value.field == "spec.engine.maxModelLen"


def test_unset_max_model_len_is_lowered_to_fit_with_a_warning() -> None:
    p = plan(server({**llama8b(), "resources": {"gpus": 1, "gpuMemoryGiB": 24}}), CATALOG)
    assert p.max_model_len is not None
    assert p.max_model_len < 131072
    assert p.max_model_len % 256 == 0
    assert "--max-model-len" in p.args
    assert any("maxModelLen lowered" in w for w in p.warnings)


def test_unknown_model_skips_the_fit_check_instead_of_guessing() -> None:
    p = plan(server({"model": {"name": "acme/secret-model"}, "engine": {"version": "0.10.2"}}), CATALOG, H100)
    assert p.memory is None
    assert "unknown model" in p.sizing
    assert p.tensor_parallel_size == 1


def test_architecture_override_sizes_an_unknown_model() -> None:
    arch = {"parameters": "13B", "layers": 40, "attentionHeads": 40, "kvHeads": 40, "headDim": 128, "maxContext": 4096}
    p = plan(
        server({"model": {"name": "acme/m", "architecture": arch}, "engine": {"version": "0.10.2"}}), CATALOG, H100
    )
    assert p.memory is not None
    assert p.memory.weights_gib == pytest.approx(13e9 * 2 / GIB, abs=0.01)
    assert p.sizing == "spec.model.architecture"


def test_quantization_reduces_weight_memory() -> None:
    base = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "engine": {"version": "0.10.2", "maxModelLen": 4096}}
    awq = {"model": base["model"], "engine": {**base["engine"], "quantization": "awq"}}  # type: ignore[dict-item]
    full, quant = plan(server(base), CATALOG, H100), plan(server(awq), CATALOG, H100)
    assert full.memory
    assert quant.memory
    # 4-bit linear layers with a 16-bit scale and 4-bit zero per 128 weights; embedding and lm_head stay 16-bit.
    assert quant.memory.weights_gib == pytest.approx(5.19, abs=0.05)
    assert quant.memory.weights_gib < full.memory.weights_gib / 2


def test_gpu_memory_comes_from_spec_then_cluster_facts() -> None:
    p = plan(server({**llama8b(), "resources": {"gpuMemoryGiB": 40}}), CATALOG, H100)
    assert (p.gpu_memory_gib, p.gpu_memory_source) == (40, "spec.resources.gpuMemoryGiB")
    p = plan(server(llama8b()), CATALOG, H100)
    assert (p.gpu_memory_gib, p.gpu_memory_source) == (80, "test")


def test_version_comes_from_the_image_tag() -> None:
    p = plan(server({"model": {"name": "m/x"}, "engine": {"image": "vllm/vllm-openai:v0.6.6.post1"}}), CATALOG)
    assert p.vllm_version == "0.6.6.post1"
    assert p.flag_catalog == "0.6.6.post1"


def test_registry_port_and_digest_do_not_confuse_the_tag() -> None:
    image = "registry.example:5000/vllm/vllm-openai:v0.8.5@sha256:" + "a" * 64
    p = plan(server({"model": {"name": "m/x"}, "engine": {"image": image}}), CATALOG)
    assert p.vllm_version == "0.8.5"
    assert p.flag_catalog == "0.8.5"


def test_latest_tag_assumes_the_newest_catalog_with_a_warning() -> None:
    p = plan(server({"model": {"name": "m/x"}, "engine": {"image": "vllm/vllm-openai:latest"}}), CATALOG)
    assert p.flag_catalog == CATALOG.newest().release.text
    assert any("has no version tag" in w for w in p.warnings)


def test_unreadable_tag_asks_for_the_version() -> None:
    with pytest.raises(PlanError, match=r"set spec\.engine\.version") as e:
        plan(server({"model": {"name": "m/x"}, "engine": {"image": "vllm/vllm-openai:nightly-gpu"}}), CATALOG)
    assert e.value.field == "spec.engine.image"


def test_releases_older_than_the_catalog_are_refused() -> None:
    with pytest.raises(PlanError, match=r"0\.5\.5 is older than 0\.6\.0"):
        plan(server({"model": {"name": "m/x"}, "engine": {"version": "0.5.5"}}), CATALOG)


def test_removed_flag_is_dropped_with_a_warning_not_passed_to_a_crashing_pod() -> None:
    new = plan(server({"model": {"name": "m/x"}, "engine": {"version": "0.33.0", "swapSpace": 4}}), CATALOG)
    assert "--swap-space" not in new.args
    assert any("spec.engine.swapSpace ignored: vLLM 0.33.0 has no --swap-space" in w for w in new.warnings)
    old = plan(server({"model": {"name": "m/x"}, "engine": {"version": "0.6.6.post1", "swapSpace": 4}}), CATALOG)
    assert old.args[old.args.index("--swap-space") + 1] == "4"


def test_unknown_extra_flag_is_refused_naming_flag_and_version() -> None:
    with pytest.raises(PlanError, match=r"--disable-log-requests is not a flag of vLLM 0\.33\.0") as e:
        plan(
            server(
                {"model": {"name": "m/x"}, "engine": {"version": "0.33.0", "extraArgs": ["--disable-log-requests"]}}
            ),
            CATALOG,
        )
    assert e.value.field == "spec.engine.extraArgs"


def test_extra_args_may_not_override_managed_flags() -> None:
    with pytest.raises(PlanError, match=r"--tensor-parallel-size is set by spec\.engine\.tensorParallelSize"):
        plan(
            server(
                {"model": {"name": "m/x"}, "engine": {"version": "0.10.2", "extraArgs": ["--tensor-parallel-size=2"]}}
            ),
            CATALOG,
        )


def test_valid_extra_args_are_passed_through_in_order() -> None:
    p = plan(
        server(
            {
                "model": {"name": "m/x"},
                "engine": {"version": "0.10.2", "extraArgs": ["--max-log-len", "100", "--disable-log-requests"]},
            }
        ),
        CATALOG,
    )
    assert p.args[-3:] == ("--max-log-len", "100", "--disable-log-requests")


def test_served_name_defaults_to_the_model_and_is_shared_with_ollama() -> None:
    p = plan(
        server(
            {
                "model": {"name": "org/m"},
                "engine": {"version": "0.10.2"},
                "fallback": {"ollama": {"model": "llama3.2:1b"}},
            }
        ),
        CATALOG,
        defaults=Defaults(),
    )
    assert p.served_name == "org/m"
    assert p.ollama is not None
    assert p.ollama.served_name == "org/m"
    assert p.args[p.args.index("--served-model-name") + 1] == "org/m"


def test_every_catalog_has_the_flags_the_operator_needs() -> None:
    for flags in CATALOG.releases:
        for flag in REQUIRED_FLAGS:
            assert flags.accepts(flag), (flags.release.text, flag)


def test_catalog_files_name_their_release() -> None:
    folder = resources.files("inference_operator.planner").joinpath("catalog", "vllm")
    names = sorted(e.name for e in folder.iterdir() if e.name.endswith(".json"))
    assert len(names) >= 2
    for name in names:
        data = json.loads(folder.joinpath(name).read_text())
        assert name == f"{data['vllm']}.json"
    assert Release("0.6.0") in {r.release for r in CATALOG.releases}


@pytest.mark.parametrize("release", [flags.release.text for flags in CATALOG.releases])
def test_model_is_positional_on_every_release(release: str) -> None:
    p = plan(server({"model": {"name": "org/m"}, "engine": {"version": release}}), CATALOG)
    assert p.args[0] == "org/m"
    assert "--model" not in p.args


def test_extra_args_may_not_pass_the_model_a_second_way() -> None:
    with pytest.raises(PlanError, match=r"--model is set by spec\.model\.name"):
        plan(server({"model": {"name": "m/x"}, "engine": {"version": "0.10.2", "extraArgs": ["--model=o/y"]}}), CATALOG)


def test_default_vllm_image_is_the_newest_release_of_the_catalog() -> None:
    assert release_from_image(DEFAULT_VLLM_IMAGE) == CATALOG.newest().release
