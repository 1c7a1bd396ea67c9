"""Which images are planned as vLLM, which release they run, and the release's own flag rules."""

import pytest

from inference_operator.planner import Defaults, FlagCatalog, PlanError, load_flag_catalog, plan
from inference_operator.planner.flag_catalog import Flag, FlagSet
from inference_operator.planner.versions import Release, is_vllm_image
from tests.support.examples import server

CATALOG = load_flag_catalog()


def engine(**fields: object) -> dict[str, object]:
    return {"model": {"name": "m/x"}, "engine": fields}


def test_a_spec_field_whose_flag_the_release_removed_is_not_rendered() -> None:
    # vLLM removed --swap-space in 0.18 and exits on it; 0.22.0 used to be checked against an older catalog.
    p = plan(server(engine(image="vllm/vllm-openai:v0.22.0", swapSpace=4)), CATALOG)
    assert p.flag_catalog == "0.22.0"
    assert "--swap-space" not in p.args
    assert any("spec.engine.swapSpace ignored" in w for w in p.warnings)
    kept = plan(server(engine(image="vllm/vllm-openai:v0.17.1", swapSpace=4)), CATALOG)
    assert kept.args[kept.args.index("--swap-space") + 1] == "4"


@pytest.mark.parametrize(
    "image",
    [
        "vllm/vllm-openai:v0.9.2",
        "docker.io/vllm/vllm-openai:v0.9.2",
        "mirror.example:5000/hub/vllm/vllm-openai:v0.9.2",
        "vllm/vllm-openai-rocm:v0.9.2",
    ],
)
def test_vllm_openai_repositories_are_vllm_from_any_registry(image: str) -> None:
    assert is_vllm_image(image)
    assert plan(server(engine(image=image)), CATALOG).vllm_version == "0.9.2"


@pytest.mark.parametrize(
    "image", ["ollama/ollama:0.12.6", "python:3.11", "nvcr.io/nvidia/tritonserver:24.08-py3", "corp/vllm:0.9.2"]
)
def test_other_images_are_refused_naming_the_image_and_how_to_proceed(image: str) -> None:
    assert not is_vllm_image(image)
    with pytest.raises(PlanError, match=r"vllm/vllm-openai image .* set spec\.engine\.version") as e:
        plan(server(engine(image=image)), CATALOG)
    assert e.value.field == "spec.engine.image"


def test_a_custom_image_is_vllm_when_its_version_is_set() -> None:
    p = plan(server(engine(image="corp/inference:2024-10", version="0.6.3.post1")), CATALOG)
    assert (p.vllm_version, p.flag_catalog) == ("0.6.3.post1", "0.6.3.post1")


def test_a_version_that_contradicts_the_image_tag_is_refused() -> None:
    with pytest.raises(PlanError, match=r"0\.10\.2 contradicts spec\.engine\.image .* vLLM 0\.9\.2") as e:
        plan(server(engine(image="vllm/vllm-openai:v0.9.2", version="0.10.2")), CATALOG)
    assert e.value.field == "spec.engine.version"


def test_an_old_tag_is_blamed_on_the_image_the_user_set() -> None:
    with pytest.raises(PlanError, match=r"0\.5\.5 is older than 0\.6\.0") as e:
        plan(server(engine(image="vllm/vllm-openai:v0.5.5")), CATALOG)
    assert e.value.field == "spec.engine.image"


def test_hotfix_releases_have_their_own_catalog() -> None:
    assert Release("0.10.1.1") > Release("0.10.1")
    p = plan(server(engine(image="vllm/vllm-openai:v0.10.1.1")), CATALOG)
    assert p.flag_catalog == "0.10.1.1"


@pytest.mark.parametrize(("release", "method"), [("0.33.0", "bitsandbytes"), ("0.10.2", "marlin")])
def test_a_quantization_method_the_release_removed_is_refused(release: str, method: str) -> None:
    with pytest.raises(PlanError, match=rf"{method} is not a quantization method of vLLM {release}; it knows .*awq"):
        plan(server(engine(version=release, quantization=method)), CATALOG)


def test_a_method_the_release_still_has_is_rendered() -> None:
    p = plan(server(engine(version="0.9.2", quantization="marlin")), CATALOG)
    assert p.args[p.args.index("--quantization") + 1] == "marlin"


def test_a_deprecated_method_needs_the_allow_flag_as_vllm_does() -> None:
    with pytest.raises(PlanError, match=r"deprecates fbgemm_fp8 .* --allow-deprecated-quantization") as e:
        plan(server(engine(version="0.33.0", quantization="fbgemm_fp8")), CATALOG)
    assert e.value.field == "spec.engine.quantization"
    allowed = engine(version="0.33.0", quantization="fbgemm_fp8", extraArgs=["--allow-deprecated-quantization"])
    p = plan(server(allowed), CATALOG)
    assert "--allow-deprecated-quantization" in p.args
    assert any("deprecates quantization fbgemm_fp8" in w for w in p.warnings)


@pytest.mark.parametrize(
    ("extra", "owner"),
    [
        (["--seed", "1", "-tp", "2"], "spec.engine.tensorParallelSize"),
        (["--tensor_parallel_size=2"], "spec.engine.tensorParallelSize"),
        (["--tensor-parallel", "2"], "spec.engine.tensorParallelSize"),
        (["--seed", "1", "-q", "awq"], "spec.engine.quantization"),
        (["--no-enforce-eager"], "spec.engine.enforceEager"),
    ],
)
def test_aliases_of_managed_flags_are_refused_as_managed(extra: list[str], owner: str) -> None:
    with pytest.raises(PlanError, match=rf"is set by {owner}; remove it from extraArgs") as e:
        plan(server(engine(version="0.10.2", extraArgs=extra)), CATALOG)
    assert e.value.field == "spec.engine.extraArgs"


def test_extra_args_spelled_as_vllm_reads_them_are_accepted() -> None:
    extra = ["--max_log_len", "10", "--seed=-1", "--compilation-config.level", "3"]
    p = plan(server(engine(version="0.10.2", extraArgs=extra)), CATALOG)
    assert p.args[-len(extra) :] == tuple(extra)


def test_extra_arg_values_outside_a_fixed_set_are_refused() -> None:
    with pytest.raises(PlanError, match=r"bogus is not a value of --preemption-mode of vLLM 0\.10\.2; it knows"):
        plan(server(engine(version="0.10.2", extraArgs=["--preemption-mode", "bogus"])), CATALOG)
    p = plan(server(engine(version="0.10.2", extraArgs=["--preemption-mode", "swap"])), CATALOG)
    assert "swap" in p.args


def test_an_ambiguous_abbreviation_is_refused() -> None:
    with pytest.raises(PlanError, match=r"--max is ambiguous for vLLM 0\.10\.2"):
        plan(server(engine(version="0.10.2", extraArgs=["--max", "3"])), CATALOG)


def _flags(release: str, **flags: Flag) -> FlagSet:
    base = {
        name: Flag(name)
        for name in ("--served-model-name", "--host", "--port", "--tensor-parallel-size", "--gpu-memory-utilization")
    }
    return FlagSet(Release(release), {**base, **{f.name: f for f in flags.values()}})


BETWEEN = FlagCatalog((_flags("1.0.0", swap=Flag("--swap-space")), _flags("1.2.0")))


def test_a_release_between_catalogs_uses_the_older_when_the_flags_it_uses_agree() -> None:
    p = plan(server(engine(image="vllm/vllm-openai:v1.1.0")), BETWEEN)
    assert (p.vllm_version, p.flag_catalog) == ("1.1.0", "1.0.0")
    assert any("no flag catalog for vLLM 1.1.0" in w for w in p.warnings)


def test_a_release_between_catalogs_is_refused_when_a_flag_it_uses_changed() -> None:
    with pytest.raises(PlanError, match=r"--swap-space, which this server uses, was removed between vLLM 1\.0\.0") as e:
        plan(server(engine(image="vllm/vllm-openai:v1.1.0", swapSpace=4)), BETWEEN)
    assert e.value.field == "spec.engine.image"


def test_a_release_newer_than_every_catalog_is_checked_against_the_newest_with_a_warning() -> None:
    p = plan(server(engine(image="vllm/vllm-openai:v1.3.0")), BETWEEN)
    assert p.flag_catalog == "1.2.0"
    assert any("newer than every flag catalog" in w for w in p.warnings)


def test_a_default_image_that_is_not_vllm_is_named_as_the_operators_default() -> None:
    with pytest.raises(PlanError, match=r"the operator's default image corp/serving:1\.2 is not a vLLM image") as e:
        plan(server(engine()), CATALOG, defaults=Defaults(vllm_image="corp/serving:1.2"))
    assert e.value.field == "spec.engine.image"
    p = plan(server(engine(version="0.9.2")), CATALOG, defaults=Defaults(vllm_image="corp/serving:1.2"))
    assert p.flag_catalog == "0.9.2"
