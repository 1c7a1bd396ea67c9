"""The flag catalog generator reads vLLM's argument code statically; checked on a small synthetic wheel."""

import textwrap
import zipfile
from pathlib import Path

from gen_vllm_flags import archive_version, catalog, read_sources

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
