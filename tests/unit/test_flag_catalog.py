"""How a release's catalog reads the spellings vLLM's parser accepts."""

from inference_operator.planner.flag_catalog import Flag, FlagSet, load_flag_catalog
from inference_operator.planner.versions import Release

FLAGS = {
    "--max-model-len": Flag("--max-model-len"),
    "--max-num-seqs": Flag("--max-num-seqs"),
    "--tensor-parallel-size": Flag("--tensor-parallel-size", aliases=("-tp",)),
    "--optimization-level": Flag("--optimization-level", aliases=("-O",)),
    "--compilation-config": Flag("--compilation-config"),
    "--enforce-eager": Flag("--enforce-eager", boolean=True),
    "--no-enforce-eager": Flag("--no-enforce-eager", boolean=True, negates="--enforce-eager"),
}


def flag_set(*, abbreviations: bool = True, underscores: bool = True, dotted_keys: bool = True) -> FlagSet:
    return FlagSet(
        Release("1.0.0"), FLAGS, abbreviations=abbreviations, underscores=underscores, dotted_keys=dotted_keys
    )


def name(flags: FlagSet, spelling: str) -> str | None:
    flag = flags.read(spelling).flag
    return flag.name if flag else None


def test_spellings_vllm_reads() -> None:
    flags = flag_set(dotted_keys=True)
    assert name(flags, "-tp") == "--tensor-parallel-size"
    assert name(flags, "--max_model_len") == "--max-model-len"
    assert name(flags, "--tensor-par") == "--tensor-parallel-size"
    assert name(flags, "-O3") == "--optimization-level"
    assert name(flags, "--compilation-config.level") == "--compilation-config"
    assert name(flags, "--compilation_config.cudagraph_capture_sizes") == "--compilation-config"
    assert flags.read("--max").ambiguous == ("--max-model-len", "--max-num-seqs")
    assert name(flags, "--nonsense") is None


def test_spellings_a_release_does_not_read() -> None:
    flags = flag_set(abbreviations=False, underscores=False, dotted_keys=False)
    assert name(flags, "--tensor-par") is None
    assert name(flags, "--max_model_len") is None
    assert name(flags, "--compilation-config.level") is None


def test_every_catalog_knows_its_managed_flags_and_aliases() -> None:
    catalog = load_flag_catalog()
    assert len(catalog.releases) >= 66
    for flags in catalog.releases:
        assert name(flags, "-tp") == "--tensor-parallel-size", flags.release
        dtype = flags.get("--dtype")
        assert dtype is not None, flags.release
        assert dtype.choices, flags.release
    assert catalog.exact(Release("0.10.1.1")) is not catalog.exact(Release("0.10.1"))
