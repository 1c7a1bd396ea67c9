"""The flag catalog generator reads vLLM's argument code statically; checked on small made-up releases."""

import io
import json
import subprocess
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from gen_vllm_flags import OLDEST, archive_version, catalog, index_versions, main, read_sources, release_key, write

ARG_UTILS = """
import argparse
from dataclasses import dataclass

@dataclass
class CacheConfig:
    enable_prefix_caching: bool = False
    block_size: int = 16

def get_kwargs(cls):
    if contains_type(type_hints, bool):
        # Creates --no-<name> and --<name> flags
        kwargs[name]["action"] = argparse.BooleanOptionalAction

class EngineArgs:
    @staticmethod
    def add_cli_args(parser):
        cache_kwargs = get_kwargs(CacheConfig)
        parser.add_argument("--model", type=str)
        parser.add_argument("--trust-remote-code", action="store_true")
        parser.add_argument("--block-size", **cache_kwargs["block_size"])
        parser.add_argument("--enable-prefix-caching", **{**cache_kwargs["enable_prefix_caching"], "default": None})
        parser.add_argument("--quantization", "-q", type=str)
"""
CLI_ARGS = """
class BaseFrontendArgs:
    lora_modules: list | None = None
    disable_frontend_multiprocessing: bool = False

class FrontendArgs(BaseFrontendArgs):
    host: str | None = None
    port: int = 8000

    @classmethod
    def add_cli_args(cls, parser):
        for key, value in get_kwargs(cls).items():
            parser.add_argument(f"--{key.replace('_', '-')}", **value)

def make_arg_parser(parser):
    parser.add_argument("--api-server-count", "-asc", type=int)
    return FrontendArgs.add_cli_args(parser)
"""


def make_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/engine/arg_utils.py", textwrap.dedent(ARG_UTILS))
        zf.writestr("vllm/entrypoints/openai/cli_args.py", textwrap.dedent(CLI_ARGS))
        zf.writestr("vllm/entrypoints/openai/run_batch.py", "def make_arg_parser(p):\n    p.add_argument('--output')\n")
    return wheel


def test_reads_literal_dataclass_and_negated_flags(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path)
    entry = catalog(read_sources(wheel), archive_version(wheel))
    flags = entry["flags"]
    assert isinstance(flags, dict)
    assert set(flags) == {
        "--model",
        "--trust-remote-code",
        "--block-size",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--quantization",
        "--api-server-count",
        "--lora-modules",
        "--disable-frontend-multiprocessing",
        "--no-disable-frontend-multiprocessing",
        "--host",
        "--port",
    }
    assert flags["--trust-remote-code"] == {"boolean": True}
    assert flags["--block-size"] == {"boolean": False}
    assert entry["vllm"] == "9.9.9"
    assert "--output" not in flags  # the batch runner's parser is not the server's


FIXTURE = Path(__file__).parent / "vllm_source_fixture"
FIXTURE_VERSION = "9.9.9"
COMMITTED = Path(__file__).resolve().parents[2] / "operator" / "inference_operator" / "planner" / "catalog" / "vllm"


def fixture_files() -> dict[str, bytes]:
    """The made-up release's modules, stored as .py.txt so that linters leave them alone."""
    return {
        str(path.relative_to(FIXTURE)).removesuffix(".txt"): path.read_bytes()
        for path in sorted(FIXTURE.rglob("*.py.txt"))
    }


def make_sdist(tmp_path: Path) -> Path:
    sdist = tmp_path / f"vllm-{FIXTURE_VERSION}.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        for name, data in fixture_files().items():
            info = tarfile.TarInfo(f"vllm-{FIXTURE_VERSION}/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return sdist


def make_fixture_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / f"vllm-{FIXTURE_VERSION}-1-cp38-abi3-manylinux_2_31_aarch64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in fixture_files().items():
            zf.writestr(name, data)
    return wheel


def test_the_fixture_release_regenerates_its_committed_catalog_byte_for_byte(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["--file", str(make_sdist(tmp_path)), "--out", str(out)]) == 0
    expected = (FIXTURE / f"{FIXTURE_VERSION}.json").read_bytes()
    assert (out / f"{FIXTURE_VERSION}.json").read_bytes() == expected
    again = tmp_path / "again"
    assert main(["--file", str(make_fixture_wheel(tmp_path)), "--out", str(again)]) == 0
    assert (again / f"{FIXTURE_VERSION}.json").read_bytes() == expected


def test_records_aliases_choices_negations_and_parser_rules(tmp_path: Path) -> None:
    entry = catalog(read_sources(make_sdist(tmp_path)), FIXTURE_VERSION)
    flags = entry["flags"]
    assert isinstance(flags, dict)
    assert flags["--tensor-parallel-size"]["aliases"] == ["-tp"]
    assert flags["--gpu-memory-utilization"]["aliases"] == ["--device-memory-utilization"]
    assert "--device-memory-utilization" not in flags
    assert flags["--optimization-level"]["aliases"] == ["-O"]  # -O3, expanded by the parser itself
    assert flags["--quantization"]["choices"] == ["awq", "fp8", "gptq", "old_method"]
    assert flags["--dtype"]["choices"] == ["auto", "bfloat16", "half"]
    assert flags["--kv-cache-dtype"] == {"boolean": False, "choices": ["auto", "fp8", "fp8_e4m3"], "other_values": True}
    assert flags["--block-size"]["choices"] == ["16", "32", "8"]
    assert flags["--chat-template-content-format"]["choices"] == ["auto", "openai", "string"]
    assert "choices" not in flags["--pooler"]  # a forward reference in an annotation is a type, not a value
    assert flags["--no-enable-prefix-caching"] == {"boolean": True, "negates": "--enable-prefix-caching"}
    assert entry["parser"] == {"abbreviations": True, "underscores": True, "dotted_keys": True}
    assert entry["deprecated_quantization"] == ["old_method"]
    assert entry["allow_deprecated_quantization"] == "--allow-deprecated-quantization"


def test_archive_versions_ignore_wheel_build_tags() -> None:
    assert archive_version(Path("vllm-0.20.1-1-cp38-abi3-manylinux_2_35_aarch64.whl")) == "0.20.1"
    assert archive_version(Path("vllm-0.6.3.post1.tar.gz")) == "0.6.3.post1"
    assert release_key("0.10.1.1") > release_key("0.10.1") > release_key("0.9.2")  # type: ignore[operator]
    assert release_key("0.11.0rc1") is None


def test_committed_catalogs_are_in_the_generators_own_form(tmp_path: Path) -> None:
    paths = sorted(COMMITTED.glob("*.json"))
    assert paths
    for path in paths:
        entry = json.loads(path.read_text())
        assert path.name == f"{entry['vllm']}.json"
        assert list(entry["flags"]) == sorted(entry["flags"])
        assert write(entry, tmp_path).read_bytes() == path.read_bytes(), path.name


def test_every_minor_release_on_the_package_index_has_a_catalog() -> None:
    """Fails when vLLM publishes a minor release that has no catalog yet: run `python hack/gen_vllm_flags.py --all`.

    A new patch of a catalogued minor is planned against the catalogs around it (when no flag the plan uses
    changed between them), so only a new minor fails here.
    """
    try:
        versions = index_versions()
    except (subprocess.CalledProcessError, OSError) as err:
        pytest.skip(f"the package index cannot be reached through pip: {err}")
    oldest = release_key(OLDEST)
    minors: dict[tuple[int, ...], str] = {}
    for version in versions:
        key = release_key(version)
        if key is None or oldest is None or key < oldest:
            continue
        minors.setdefault(key[:2], version)
    assert len(minors) >= 28  # 0.6 to 0.33 when this test was written
    catalogued = set()
    for path in COMMITTED.glob("*.json"):
        key = release_key(path.name.removesuffix(".json"))
        if key is not None:
            catalogued.add(key[:2])
    missing = sorted(version for minor, version in minors.items() if minor not in catalogued)
    assert not missing, f"no flag catalog for vLLM {', '.join(missing)} (a minor release)"
