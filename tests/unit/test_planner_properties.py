"""Invariants of the planner and the revision hash, over generated specs."""

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inference_operator.api import InferenceServer
from inference_operator.planner import CATALOG as MODELS
from inference_operator.planner import ClusterFacts, PlanError, load_flag_catalog, plan
from inference_operator.render import Owner, revision, vllm_deployment, vllm_pods

FLAGS = load_flag_catalog()
FACTS = ClusterFacts(gpu_memory_gib=80.0, gpu_memory_source="test", max_gpus_per_node=8)
RELEASES = [f.release.text for f in FLAGS.releases]

engine_st = st.fixed_dictionaries(
    {"version": st.sampled_from(RELEASES)},
    optional={
        "tensorParallelSize": st.one_of(st.just("auto"), st.sampled_from([1, 2, 4, 8])),
        "pipelineParallelSize": st.sampled_from([1, 2]),
        "gpuMemoryUtilization": st.sampled_from([0.5, 0.8, 0.9, 0.95]),
        "maxModelLen": st.sampled_from([2048, 4096, 8192]),
        "maxNumSeqs": st.integers(1, 512),
        "dtype": st.sampled_from(["auto", "bfloat16", "float16"]),
        "quantization": st.sampled_from(["awq", "fp8", "gptq"]),
        "kvCacheDtype": st.sampled_from(["auto", "fp8"]),
        "enforceEager": st.booleans(),
        "enablePrefixCaching": st.booleans(),
        "swapSpace": st.integers(0, 16),
    },
)
spec_st = st.fixed_dictionaries(
    {
        "model": st.fixed_dictionaries({"name": st.sampled_from([f"org/{m.name}" for m in MODELS] + ["org/unknown"])}),
        "engine": engine_st,
    },
    optional={
        "replicas": st.integers(1, 4),
        "resources": st.fixed_dictionaries(
            {}, optional={"cpu": st.sampled_from([1, 4, "500m"]), "memory": st.sampled_from(["16Gi", "64Gi"])}
        ),
    },
)


def make(spec: dict[str, Any]) -> InferenceServer:
    return InferenceServer.model_validate({"metadata": {"name": "p"}, "spec": spec})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_st)
def test_tp_times_pp_equals_gpus_and_output_is_deterministic(spec: dict[str, Any]) -> None:
    server = make(spec)
    try:
        first = plan(server, FLAGS, FACTS)
    except PlanError as err:
        assert err.field.startswith("spec."), err  # noqa: PT017 - a refusal naming its field satisfies the property
        return
    assert first.tensor_parallel_size * first.pipeline_parallel_size == first.gpus
    again = plan(make(spec), FLAGS, FACTS)
    assert again == first
    assert revision(again) == revision(first)
    flags = next(f for f in FLAGS.releases if f.release.text == first.flag_catalog)
    assert all(flags.accepts(a) for a in first.args if a.startswith("--"))


def _reordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    return value


@settings(max_examples=150, deadline=None)
@given(spec_st)
def test_revision_ignores_field_order(spec: dict[str, Any]) -> None:
    try:
        a = plan(make(spec), FLAGS, FACTS)
    except PlanError:
        return
    b = plan(make(_reordered(spec)), FLAGS, FACTS)
    assert revision(a) == revision(b)


POD_AFFECTING = [
    ("model", {"name": "org/llama-3.1-8b", "revision": "abc123"}),
    ("engine", {"version": "0.10.2", "image": "vllm/vllm-openai:v0.10.2", "maxNumSeqs": 77}),
    ("engine", {"version": "0.10.2", "enforceEager": True}),
    ("engine", {"version": "0.10.2", "env": [{"name": "X", "value": "1"}]}),
    ("engine", {"version": "0.10.2", "gpuMemoryUtilization": 0.5}),
    ("resources", {"cpu": 7}),
    ("resources", {"memory": "99Gi"}),
    ("resources", {"sharedMemory": "1Gi"}),
    ("scheduling", {"nodeSelector": {"pool": "a100"}}),
    ("scheduling", {"priorityClassName": "high"}),
    ("cache", {"size": "10Gi"}),
    ("podMetadata", {"annotations": {"a": "b"}}),
]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(POD_AFFECTING))
def test_revision_changes_with_every_pod_affecting_field(change: tuple[str, dict[str, Any]]) -> None:
    base = {"model": {"name": "org/llama-3.1-8b"}, "engine": {"version": "0.10.2"}}
    key, value = change
    changed = {**base, key: value}
    assert revision(plan(make(changed), FLAGS, FACTS)) != revision(plan(make(base), FLAGS, FACTS))


def test_revision_ignores_fields_that_do_not_touch_the_vllm_pods() -> None:
    base = {"model": {"name": "org/llama-3.1-8b"}, "engine": {"version": "0.10.2"}}
    same = [
        {**base, "replicas": 3},
        {**base, "rollout": {"strategy": "Recreate", "timeoutSeconds": 900}},
        {**base, "service": {"port": 9000, "type": "NodePort"}},
        {**base, "fallback": {"ollama": {"model": "llama3.2:1b"}}},
    ]
    reference = revision(plan(make(base), FLAGS, FACTS))
    for spec in same:
        assert revision(plan(make(spec), FLAGS, FACTS)) == reference, spec


pod_metadata_st = st.fixed_dictionaries(
    {},
    optional={
        "labels": st.dictionaries(
            st.sampled_from(["team", "inference-operator.dev/revision"]), st.sampled_from(["a", "b"])
        ),
        "annotations": st.dictionaries(st.sampled_from(["note"]), st.sampled_from(["x"])),
    },
)


@settings(max_examples=150, deadline=None)
@given(spec_st, pod_metadata_st, st.integers(0, 4))
def test_deployment_from_the_pods_rendered_once_equals_a_fresh_render(
    spec: dict[str, Any], pod_metadata: dict[str, Any], replicas: int
) -> None:
    try:
        launch = plan(make({**spec, "podMetadata": pod_metadata}), FLAGS, FACTS)
    except PlanError:
        return
    owner = Owner(name="p", uid="u")
    pods = vllm_pods(launch)
    assert pods.revision == revision(launch)
    once = vllm_deployment(launch, pods.revision, owner, replicas=replicas, pods=pods)
    assert once == vllm_deployment(launch, pods.revision, owner, replicas=replicas)
    assert once["spec"]["template"] is not pods.template  # the caller may change its copy
