"""Plans that start on real GPUs: heads and TP, compute capability and dtype, and per-release rules."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inference_operator.planner import ClusterFacts, PlanError, load_flag_catalog, lookup, plan
from inference_operator.planner.gpu_catalog import ComputeCapability, gpu_model
from inference_operator.planner.plan import valid_tensor_parallel_sizes
from tests.support.examples import server

CATALOG = load_flag_catalog()


def gpu(product: str, nodes_gpus: int = 8) -> ClusterFacts:
    model = gpu_model(product)
    assert model is not None, product
    return ClusterFacts(
        gpu_memory_gib=model.memory_gib,
        gpu_memory_source="test",
        max_gpus_per_node=nodes_gpus,
        compute_capability=model.compute_capability,
        compute_capability_source="test",
        gpu_product=model.product,
    )


def spec(model: str, version: str = "0.10.2", **engine: Any) -> dict[str, Any]:
    return {"model": {"name": model}, "engine": {"version": version, **engine}}


# --- heads -------------------------------------------------------------------------------------------------


def test_tp_three_is_refused_when_the_kv_heads_do_not_divide_by_it() -> None:
    # Llama-3.2-3B: 24 attention heads divide by 3; its 8 KV heads do not, and vLLM asserts.
    with pytest.raises(PlanError, match=r"8 KV heads") as e:
        plan(server(spec("meta-llama/Llama-3.2-3B-Instruct", tensorParallelSize=3)), CATALOG, gpu("NVIDIA-A10G"))
    assert e.value.field == "spec.engine.tensorParallelSize"
    assert "valid sizes on a node of 8 GPUs are 1, 2, 4, 8" in str(e.value)


def test_auto_tp_never_picks_a_size_the_kv_heads_forbid() -> None:
    # phi-4: 40 heads, 10 KV heads; 4 divides neither 10 nor is a multiple of it.
    small = ClusterFacts(gpu_memory_gib=16, gpu_memory_source="test", max_gpus_per_node=8)
    p = plan(server(spec("microsoft/phi-4")), CATALOG, small)
    assert p.tensor_parallel_size != 4
    assert p.tensor_parallel_size in (1, 2, 5, 10)


def test_a_replica_larger_than_any_node_is_refused() -> None:
    with pytest.raises(PlanError, match="more than the 4 GPUs of the largest eligible node"):
        plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", tensorParallelSize=8)), CATALOG, gpu("NVIDIA-L4", 4))


def test_the_list_of_valid_sizes_holds_only_sizes_that_fit_a_node() -> None:
    with pytest.raises(PlanError) as e:
        plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", tensorParallelSize=3)), CATALOG, gpu("NVIDIA-L4", 4))
    assert str(e.value).endswith("valid sizes on a node of 4 GPUs are 1, 2, 4")


def test_auto_tp_stays_within_a_node() -> None:
    # 70B in 16 bits needs at least 2 x 80 GB; with 1-GPU nodes nothing fits.
    with pytest.raises(PlanError, match="does not fit on up to 1 GPUs per node"):
        plan(server(spec("meta-llama/Llama-3.3-70B-Instruct")), CATALOG, gpu("NVIDIA-H100-80GB-HBM3", 1))


@given(heads=st.sampled_from([8, 12, 14, 16, 24, 28, 32, 40, 48, 64]), kv=st.sampled_from([1, 2, 4, 8, 10, 16]))
def test_every_listed_size_satisfies_vllms_assertion(heads: int, kv: int) -> None:
    if heads % kv:
        return
    base = lookup("llama-3.1-8b")
    assert base is not None
    from dataclasses import replace

    size = replace(base, attention_heads=heads, kv_heads=kv)
    for tp in valid_tensor_parallel_sizes(size, 16):
        assert heads % tp == 0
        assert kv % tp == 0 or tp % kv == 0


# --- compute capability and dtype ---------------------------------------------------------------------------


def test_bf16_checkpoint_on_turing_renders_half_where_the_release_does_not_fall_back() -> None:
    p = plan(server(spec("Qwen/Qwen2.5-1.5B-Instruct", "0.6.6.post1")), CATALOG, gpu("NVIDIA-GeForce-RTX-2080-Ti"))
    assert p.args[p.args.index("--dtype") + 1] == "half"
    assert any("rendered --dtype half" in w for w in p.warnings)


def test_releases_that_fall_back_themselves_get_no_dtype_flag() -> None:
    p = plan(server(spec("Qwen/Qwen2.5-1.5B-Instruct", "0.10.2")), CATALOG, gpu("Tesla-T4"))
    assert "--dtype" not in p.args


def test_ampere_keeps_the_checkpoints_bfloat16() -> None:
    p = plan(server(spec("Qwen/Qwen2.5-1.5B-Instruct", "0.6.6.post1")), CATALOG, gpu("NVIDIA-A10G"))
    assert "--dtype" not in p.args


def test_explicit_bfloat16_below_ampere_is_refused_with_the_numbers() -> None:
    with pytest.raises(PlanError, match=r"compute capability 8\.0 or higher; these GPUs have compute capability 7\.5"):
        plan(server(spec("Qwen/Qwen2.5-1.5B-Instruct", dtype="bfloat16")), CATALOG, gpu("Tesla-T4"))


def test_fp8_weights_below_ada_are_refused() -> None:
    with pytest.raises(PlanError, match=r"8\.9 or higher; these GPUs have compute capability 8\.0") as e:
        plan(server(spec("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8")), CATALOG, gpu("NVIDIA-A100-SXM4-80GB"))
    assert e.value.field == "spec.model.name"
    with pytest.raises(PlanError, match=r"8\.9") as e:
        plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", quantization="fp8")), CATALOG, gpu("NVIDIA-A10G"))
    assert e.value.field == "spec.engine.quantization"


def test_fp8_kv_cache_below_ada_is_refused() -> None:
    with pytest.raises(PlanError, match=r"FP8 KV cache needs .* 8\.9") as e:
        plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", kvCacheDtype="fp8")), CATALOG, gpu("NVIDIA-A10G"))
    assert e.value.field == "spec.engine.kvCacheDtype"
    ok = plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", kvCacheDtype="fp8")), CATALOG, gpu("NVIDIA-L4"))
    assert "--kv-cache-dtype" in ok.args


def test_gpu_catalog_knows_the_products_gpu_feature_discovery_publishes() -> None:
    for product, gib, cc in (
        ("Tesla-T4", 15.0, "7.5"),
        ("Tesla-V100-SXM2-32GB", 32.0, "7.0"),
        ("NVIDIA-A100-SXM4-80GB", 80.0, "8.0"),
        ("NVIDIA-A100-80GB-PCIe", 80.0, "8.0"),
        ("NVIDIA-H100-80GB-HBM3", 79.65, "9.0"),
        ("NVIDIA-L40S", 44.99, "8.9"),
        ("NVIDIA-GeForce-RTX-4090", 23.99, "8.9"),
        ("NVIDIA-GeForce-RTX-2080-Ti", 11.0, "7.5"),
        ("NVIDIA-H200", 140.4, "9.0"),
        ("NVIDIA-B200", 179.06, "10.0"),
    ):
        model = gpu_model(product)
        assert model is not None, product
        assert model.memory_gib == pytest.approx(gib, abs=0.01), product
        assert str(model.compute_capability) == cc, product
    assert gpu_model("NVIDIA-A100-SXM4-80GB-SHARED") == gpu_model("NVIDIA-A100-SXM4-80GB")
    assert gpu_model("RTX-3090") == gpu_model("NVIDIA-GeForce-RTX-3090")
    assert gpu_model("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb") is None
    assert ComputeCapability.parse("8.9") > ComputeCapability.parse("8.6")
    with pytest.raises(ValueError, match="not a compute capability"):
        ComputeCapability.parse("eight")


# --- per-release rules ---------------------------------------------------------------------------------------


def test_max_model_len_above_the_context_is_refused_without_the_allow_switch() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    with pytest.raises(PlanError, match="VLLM_ALLOW_LONG_MAX_MODEL_LEN") as e:
        plan(server(spec("meta-llama/Meta-Llama-3-8B-Instruct", maxModelLen=16384)), CATALOG, facts)
    assert e.value.field == "spec.engine.maxModelLen"
    # Without GPU facts it is refused too: vLLM refuses it whatever the GPU.
    with pytest.raises(PlanError, match="exceed the model's context of 8192"):
        plan(server(spec("meta-llama/Meta-Llama-3-8B-Instruct", maxModelLen=16384)), CATALOG)
    allowed = spec(
        "meta-llama/Meta-Llama-3-8B-Instruct",
        maxModelLen=16384,
        env=[{"name": "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "value": "1"}],
    )
    p = plan(server(allowed), CATALOG, facts)
    assert p.max_model_len == 16384


def test_gemma2_context_is_its_window_up_to_0_6_4() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    old = plan(server(spec("google/gemma-2-9b-it", "0.6.3.post1")), CATALOG, facts)
    assert old.max_model_len == 4096
    with pytest.raises(PlanError, match="context of 4096 tokens"):
        plan(server(spec("google/gemma-2-9b-it", "0.6.3.post1", maxModelLen=8192)), CATALOG, facts)
    new = plan(server(spec("google/gemma-2-9b-it", "0.6.6.post1", maxModelLen=8192)), CATALOG, facts)
    assert new.max_model_len == 8192


def test_longrope_models_default_to_their_original_context_on_recent_releases() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    recent = plan(server(spec("microsoft/Phi-3.5-mini-instruct", "0.15.1")), CATALOG, facts)
    assert recent.max_model_len == 4096
    older = plan(server(spec("microsoft/Phi-3.5-mini-instruct", "0.10.2")), CATALOG, facts)
    assert older.max_model_len == 131072
    # Asking for the long context is still allowed: it is within the model's limit.
    long = plan(server(spec("microsoft/Phi-3.5-mini-instruct", "0.15.1", maxModelLen=65536)), CATALOG, facts)
    assert long.max_model_len == 65536


def test_v0_needs_batched_tokens_to_hold_a_sequence_unless_chunked() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    v0 = spec("meta-llama/Llama-3.1-8B-Instruct", "0.6.6.post1", maxModelLen=16384, maxNumBatchedTokens=8192)
    with pytest.raises(PlanError, match="V0 engine") as e:
        plan(server(v0), CATALOG, facts)
    assert e.value.field == "spec.engine.maxNumBatchedTokens"
    chunked = {**v0, "engine": {**v0["engine"], "extraArgs": ["--enable-chunked-prefill"]}}
    assert plan(server(chunked), CATALOG, facts).max_model_len == 16384
    v1 = spec("meta-llama/Llama-3.1-8B-Instruct", "0.10.2", maxModelLen=16384, maxNumBatchedTokens=8192)
    assert plan(server(v1), CATALOG, facts).engine == "V1"
    forced_v0 = {**v1, "engine": {**v1["engine"], "env": [{"name": "VLLM_USE_V1", "value": "0"}]}}
    with pytest.raises(PlanError, match="V0 engine"):
        plan(server(forced_v0), CATALOG, facts)


# --- memory model terms ----------------------------------------------------------------------------------------


def test_sliding_window_layers_hold_only_their_window_where_the_allocator_allows() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    hybrid = plan(server(spec("google/gemma-2-9b-it", "0.10.2", maxModelLen=8192)), CATALOG, facts)
    full = plan(server(spec("google/gemma-2-9b-it", "0.9.2", maxModelLen=8192)), CATALOG, facts)
    assert hybrid.memory is not None
    assert full.memory is not None
    # Gemma 2 alternates: 21 of 42 layers slide over 4096 tokens, so an 8192-token sequence needs 3/4 of the KV.
    assert hybrid.memory.kv_cache_per_sequence_gib == pytest.approx(
        full.memory.kv_cache_per_sequence_gib * 0.75, abs=0.01
    )


def test_overhead_grows_with_tensor_parallelism() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    overheads = []
    for tp in (1, 2, 4, 8):
        p = plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", tensorParallelSize=tp)), CATALOG, facts)
        assert p.memory is not None
        overheads.append(p.memory.overhead_gib)
    assert overheads == sorted(overheads)
    # NCCL and custom all-reduce buffers: about 5 GiB more per GPU at TP 8 than on one GPU.
    assert overheads[-1] - overheads[0] > 4


def test_v0_profiles_the_whole_max_length_and_v1_one_batch() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    v0 = plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", "0.6.6.post1", maxModelLen=30000)), CATALOG, facts)
    v1 = plan(server(spec("meta-llama/Llama-3.1-8B-Instruct", "0.10.2", maxModelLen=30000)), CATALOG, facts)
    assert (v0.engine, v1.engine) == ("V0", "V1")
    assert v0.memory is not None
    assert v1.memory is not None
    # (3 x 4096 + 3 x 14336) x 2 bytes a token: 30000 tokens on V0, one 8192-token batch on V1 (an 80 GiB GPU).
    per_token = (3 * 4096 + 3 * 14336) * 2 / 2**30
    assert v0.memory.overhead_gib - v1.memory.overhead_gib == pytest.approx(per_token * (30000 - 8192), abs=0.02)


def test_a_model_known_only_by_its_parameter_count_is_still_checked_for_weight_memory() -> None:
    only_size = {"parameters": "17B"}
    facts = gpu("NVIDIA-GeForce-RTX-2080-Ti", 3)
    big = {"model": {"name": "example/dense-17b", "architecture": only_size}, "engine": {"tensorParallelSize": 3}}
    with pytest.raises(PlanError, match=r"10\.6 GiB of weights per GPU") as e:
        plan(server({**big, "engine": {"version": "0.10.2", "tensorParallelSize": 3}}), CATALOG, facts)
    assert e.value.field == "spec.resources.gpus"
    auto = {
        "model": {"name": "example/dense-7b", "architecture": {"parameters": "7B"}},
        "engine": {"version": "0.10.2"},
    }
    p = plan(server(auto), CATALOG, facts)
    assert p.tensor_parallel_size == 2
    assert any("from the weights alone" in w for w in p.warnings)


def test_a_window_on_every_layer_caps_the_kv_cache_on_every_release() -> None:
    facts = gpu("NVIDIA-H100-80GB-HBM3")
    for version in ("0.6.6.post1", "0.10.2"):
        v01 = plan(server(spec("mistralai/Mistral-7B-Instruct-v0.1", version, maxModelLen=32768)), CATALOG, facts)
        v03 = plan(server(spec("mistralai/Mistral-7B-Instruct-v0.3", version, maxModelLen=32768)), CATALOG, facts)
        assert v01.memory is not None
        assert v03.memory is not None
        # 4096 of 32768 tokens are kept.
        assert v01.memory.kv_cache_per_sequence_gib == pytest.approx(v03.memory.kv_cache_per_sequence_gib / 8, abs=0.01)


def test_v1_falls_back_to_v0_below_ampere_until_0_10_2() -> None:
    small = spec("Qwen/Qwen2.5-1.5B-Instruct", "0.9.2", maxModelLen=4096)
    assert plan(server(small), CATALOG, gpu("Tesla-T4")).engine == "V0"
    assert plan(server(small), CATALOG, gpu("NVIDIA-L4")).engine == "V1"
    newer = spec("Qwen/Qwen2.5-1.5B-Instruct", "0.10.2", maxModelLen=4096)
    assert plan(server(newer), CATALOG, gpu("Tesla-T4")).engine == "V1"


@pytest.mark.parametrize(
    ("short", "product"),
    [
        ("RTX 4090", "NVIDIA-GeForce-RTX-4090"),
        ("A100-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("a100 40gb", "NVIDIA-A100-SXM4-40GB"),
        ("V100-32GB", "Tesla-V100-SXM2-32GB"),
        ("T4", "Tesla-T4"),
        ("2080-Ti", "NVIDIA-GeForce-RTX-2080-Ti"),
    ],
)
def test_short_product_names_give_the_weakest_matching_gpu(short: str, product: str) -> None:
    found, expected = gpu_model(short), gpu_model(product)
    assert found is not None
    assert expected is not None
    assert (found.memory_mib, found.compute_capability) == (expected.memory_mib, expected.compute_capability)


def test_an_ambiguous_short_name_plans_for_the_smallest_gpu() -> None:
    a100 = gpu_model("A100")
    assert a100 is not None
    assert a100.memory_gib == 40.0
    assert gpu_model("Imaginary-GPU") is None
