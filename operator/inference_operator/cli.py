"""inference-operator run | render | plan | crd"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from . import __version__
from .api import KIND, InferenceServer
from .api.crd import crd_yaml
from .controller.options import add_run_arguments
from .planner import ClusterFacts, Defaults, LaunchPlan, PlanError, load_flag_catalog, plan
from .planner.gpu_catalog import GPUS, ComputeCapability, gpu_model
from .planner.vllm_args import VLLM_COMMAND
from .render import objects, revision


class InputError(Exception):
    """Bad input: the message is one paragraph naming the file, the object and the field."""


def _describe_validation(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"])
        got = item.get("input")
        shown = "" if isinstance(got, dict | list) or got is None else f" (got {got!r})"
        parts.append(f"{where}: {item['msg']}{shown}")
    return "; ".join(parts)


def load_servers(paths: Sequence[str]) -> Iterator[tuple[str, InferenceServer]]:
    for path in paths:
        text = sys.stdin.read() if path == "-" else _read(path)
        try:
            documents = [d for d in yaml.safe_load_all(text) if d is not None]
        except yaml.YAMLError as err:
            raise InputError(f"{path}: not valid YAML: {err}") from err
        for doc in documents:
            if not isinstance(doc, dict) or doc.get("kind") != KIND:
                continue
            name = (doc.get("metadata") or {}).get("name", "<unnamed>")
            try:
                yield path, InferenceServer.model_validate(doc)
            except ValidationError as err:
                raise InputError(f'{path}: {KIND} "{name}" is invalid: {_describe_validation(err)}.') from err


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as err:
        raise InputError(f"{path}: cannot read: {err.strerror}") from err


def _plan(path: str, server: InferenceServer, facts: ClusterFacts, defaults: Defaults) -> LaunchPlan:
    try:
        return plan(server, load_flag_catalog(), facts, defaults)
    except PlanError as err:
        raise InputError(f'{path}: {KIND} "{server.metadata.name}" cannot be served: {err}.') from err


def _plan_row(p: LaunchPlan) -> dict[str, Any]:
    status = p.status().model_dump(by_alias=True, exclude_none=True)
    return {
        "name": p.name,
        "namespace": p.namespace,
        "model": p.spec.model.name,
        "revision": revision(p),
        **status,
        "engine": p.engine,
        "dtype": p.dtype,
        **({"gpuComputeCapability": p.compute_capability} if p.compute_capability else {}),
        "command": [*VLLM_COMMAND, *p.args],
    }


def _table(plans: list[LaunchPlan], out: TextIO) -> None:
    header = ["NAME", "MODEL", "VLLM", "GPUS", "TP", "PP", "MAX-LEN", "WEIGHTS/GPU", "NEEDED", "AVAILABLE", "SEQS"]
    rows = [header]
    for p in plans:
        m = p.memory
        rows.append(
            [
                p.name,
                p.spec.model.name,
                p.vllm_version,
                str(p.gpus),
                str(p.tensor_parallel_size),
                str(p.pipeline_parallel_size),
                str(p.max_model_len or "-"),
                f"{m.weights_gib:.1f}GiB" if m else "-",
                f"{m.required_gib:.1f}GiB" if m else "-",
                f"{m.available_gib:.1f}GiB" if m else "-",
                str(m.max_sequences) if m else "-",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    out.write("\n")
    for p in plans:
        out.write(f"{p.name}: sizes from {p.sizing}; GPU memory from {p.gpu_memory_source}\n")
        for w in p.warnings:
            out.write(f"{p.name}: warning: {w}\n")


def _facts(args: argparse.Namespace) -> ClusterFacts:
    """The GPU the command line describes: --gpu-product fills in what --gpu-memory-gib and
    --gpu-compute-capability do not give."""
    if args.gpus_per_node is not None and args.gpus_per_node < 1:
        raise InputError(f"--gpus-per-node {args.gpus_per_node}: must be 1 or more")
    product = gpu_model(args.gpu_product) if args.gpu_product else None
    if args.gpu_product and product is None:
        known = ", ".join(g.product for g in GPUS)
        raise InputError(f"--gpu-product {args.gpu_product}: not a GPU this version knows; known products: {known}")
    memory, memory_source = args.gpu_memory_gib, "--gpu-memory-gib"
    if memory is None and product is not None:
        memory, memory_source = product.memory_gib, f"--gpu-product {product.product}"
    capability, capability_source = None, ""
    if args.gpu_compute_capability is not None:
        try:
            capability = ComputeCapability.parse(args.gpu_compute_capability)
        except ValueError as err:
            raise InputError(f"--gpu-compute-capability: {err}") from err
        capability_source = "--gpu-compute-capability"
    elif product is not None:
        capability, capability_source = product.compute_capability, f"--gpu-product {product.product}"
    return ClusterFacts(
        gpu_memory_gib=memory,
        gpu_memory_source=memory_source if memory is not None else "",
        max_gpus_per_node=args.gpus_per_node,
        compute_capability=capability,
        compute_capability_source=capability_source,
        gpu_product=product.product if product else args.gpu_product,
    )


def _defaults(args: argparse.Namespace) -> Defaults:
    base = Defaults()
    return Defaults(
        vllm_image=args.vllm_image or base.vllm_image,
        ollama_image=args.ollama_image or base.ollama_image,
    )


def cmd_render(args: argparse.Namespace, out: TextIO) -> int:
    docs: list[dict[str, Any]] = []
    for path, server in load_servers(args.files):
        docs.extend(objects(_plan(path, server, _facts(args), _defaults(args))))
    out.write(yaml.safe_dump_all(docs, sort_keys=False))
    return 0


def cmd_plan(args: argparse.Namespace, out: TextIO) -> int:
    plans = [_plan(path, server, _facts(args), _defaults(args)) for path, server in load_servers(args.files)]
    if args.output == "json":
        out.write(json.dumps([_plan_row(p) for p in plans], indent=2) + "\n")
    elif args.output == "yaml":
        out.write(yaml.safe_dump([_plan_row(p) for p in plans], sort_keys=False))
    else:
        _table(plans, out)
    return 0


def cmd_crd(args: argparse.Namespace, out: TextIO) -> int:
    if args.reference:
        from .api.reference import reference

        out.write(reference())
    else:
        out.write(crd_yaml())
    return 0


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from .controller.main import run

    return run(args)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="inference-operator", description="vLLM inference servers on Kubernetes.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def offline(name: str, help_text: str) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_text)
        cmd.add_argument("files", nargs="+", help="InferenceServer YAML files (- for standard input)")
        cmd.add_argument("--gpu-memory-gib", type=float, help="GPU memory to plan with when the spec does not say")
        cmd.add_argument(
            "--gpu-compute-capability", metavar="X.Y", help="compute capability of the GPUs, such as 7.5 or 8.9"
        )
        cmd.add_argument(
            "--gpu-product",
            metavar="NAME",
            help="GPU product as GPU feature discovery labels it (NVIDIA-A100-SXM4-80GB, Tesla-T4); "
            "gives the memory and compute capability not set otherwise",
        )
        cmd.add_argument(
            "--gpus-per-node", type=int, metavar="N", help="GPUs of the largest node: bounds tensor parallelism"
        )
        cmd.add_argument("--vllm-image", help="default vLLM image (as the operator's --vllm-image)")
        cmd.add_argument("--ollama-image", help="default Ollama image (as the operator's --ollama-image)")
        return cmd

    offline("render", "print every child object as multi-document YAML").set_defaults(func=cmd_render)
    plan_cmd = offline("plan", "print the launch plan: GPUs, parallelism, memory fit, vLLM arguments")
    plan_cmd.add_argument("--output", "-o", choices=["table", "json", "yaml"], default="table")
    plan_cmd.set_defaults(func=cmd_plan)
    crd_cmd = sub.add_parser("crd", help="print the CustomResourceDefinition")
    crd_cmd.add_argument("--reference", action="store_true", help="print the Markdown API reference instead")
    crd_cmd.set_defaults(func=cmd_crd)
    run_cmd = sub.add_parser("run", help="run the operator")
    add_run_arguments(run_cmd)
    run_cmd.set_defaults(func=cmd_run)
    return p


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args, out or sys.stdout)
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
