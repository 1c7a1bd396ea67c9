"""Builds the vLLM flag catalog: the command-line flags each vLLM release's OpenAI server accepts.

It reads the release's Python source out of its wheel and parses it with `ast`; vllm and torch are
never imported (nor installed). The result is committed as data under
operator/inference_operator/planner/catalog/vllm/<version>.json.

    python hack/gen_vllm_flags.py 0.6.6.post1 0.10.2 ...      # downloads wheels with pip (no deps)
    python hack/gen_vllm_flags.py --wheel vllm-0.6.6.post1-*.whl

Flags come from three places, which together make up `vllm serve` across releases:
- literal `add_argument("--flag", ...)` calls in the engine arguments and the server's parser;
- `add_argument("--flag", **kwargs["field"])` where the kwargs come from a config dataclass: the
  field's annotation tells whether the flag is boolean (then `--no-flag` exists as well);
- frontend argument dataclasses whose every field becomes `--field-name`.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "operator" / "inference_operator" / "planner" / "catalog" / "vllm"
ENGINE_ARGS = "vllm/engine/arg_utils.py"


def server_parser_files(sources: dict[str, str]) -> list[str]:
    """Files that build the OpenAI server's parser (the module moved between releases)."""
    return sorted(
        path
        for path, text in sources.items()
        if path.startswith("vllm/entrypoints/")
        and "run_batch" not in path
        and re.search(r"^def make_arg_parser\(", text, re.MULTILINE)
    )


def read_sources(wheel: Path) -> dict[str, str]:
    with zipfile.ZipFile(wheel) as zf:
        return {
            name: zf.read(name).decode("utf-8", errors="replace")
            for name in zf.namelist()
            if name.startswith("vllm/") and name.endswith(".py")
        }


def wheel_version(wheel: Path) -> str:
    match = re.match(r"vllm-([^-]+)-", wheel.name)
    if not match:
        raise SystemExit(f"not a vllm wheel: {wheel.name}")
    return match.group(1)


def field_annotations(trees: Iterable[ast.Module]) -> dict[str, dict[str, str]]:
    """class name -> {field: annotation source} for every class with annotated fields."""
    out: dict[str, dict[str, str]] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                fields = {
                    stmt.target.id: ast.unparse(stmt.annotation)
                    for stmt in node.body
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                }
                if fields:
                    out.setdefault(node.name, {}).update(fields)
    return out


def is_bool_annotation(annotation: str) -> bool:
    return re.search(r"\bbool\b", annotation) is not None


def _keyword_is_boolean_action(call: ast.Call) -> tuple[bool, bool]:
    """(is boolean, has --no- form) from an explicit action= keyword."""
    for kw in call.keywords:
        if kw.arg != "action":
            continue
        if isinstance(kw.value, ast.Constant) and kw.value.value in ("store_true", "store_false"):
            return True, False
        if isinstance(kw.value, ast.Attribute) and kw.value.attr == "BooleanOptionalAction":
            return True, True
        if isinstance(kw.value, ast.Name) and kw.value.id == "BooleanOptionalAction":
            return True, True
    return False, False


def _kwargs_field(call: ast.Call) -> str | None:
    """The config field behind `**something["field"]`, if that is how the kwargs are passed."""
    for kw in call.keywords:
        if kw.arg is not None:
            continue
        # `**kwargs["field"]`, or `**{**kwargs["field"], "default": ...}`
        candidates = [kw.value]
        if isinstance(kw.value, ast.Dict):
            candidates = [v for k, v in zip(kw.value.keys, kw.value.values, strict=True) if k is None]
        for value in candidates:
            if isinstance(value, ast.Subscript):
                key = value.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    return key.value
    return None


def literal_flags(
    tree: ast.Module, bool_fields: set[str], config_bools_negatable: bool
) -> Iterator[tuple[str, bool, bool]]:
    """(flag, boolean, negatable) for every add_argument call with literal long options."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "add_argument":
            continue
        names = [
            a.value
            for a in node.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("--")
        ]
        if not names:
            continue
        boolean, negatable = _keyword_is_boolean_action(node)
        field = _kwargs_field(node)
        if not boolean and field is not None and field in bool_fields:
            boolean, negatable = True, config_bools_negatable
        for name in names:
            yield name, boolean, negatable


def _has_dashed_fstring(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                return True
    return False


def dataclass_flags(tree: ast.Module) -> Iterator[tuple[str, bool, bool]]:
    """Flags of argument dataclasses that register every field as --field-name."""
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}

    def lineage(cls: ast.ClassDef) -> Iterator[ast.ClassDef]:
        yield cls
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                yield from lineage(classes[base.id])

    for cls in classes.values():
        methods = [m for c in lineage(cls) for m in c.body if isinstance(m, ast.FunctionDef)]
        if not any(m.name == "add_cli_args" and _has_dashed_fstring(m) for m in methods):
            continue
        for c in lineage(cls):
            for stmt in c.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    name = stmt.target.id
                    if name.startswith("_") or "ClassVar" in ast.unparse(stmt.annotation):
                        continue
                    boolean = is_bool_annotation(ast.unparse(stmt.annotation))
                    yield "--" + name.replace("_", "-"), boolean, boolean


def catalog(sources: dict[str, str], version: str) -> dict[str, object]:
    trees = {path: ast.parse(text, filename=path) for path, text in sources.items()}
    annotations = field_annotations(trees.values())
    bool_fields = {f for fields in annotations.values() for f, ann in fields.items() if is_bool_annotation(ann)}
    engine_src = sources.get(ENGINE_ARGS, "")
    # Releases whose config-to-argparse helper turns booleans into BooleanOptionalAction.
    config_bools_negatable = (
        re.search(r"contains_type\([^)]*bool\)(?:[^\n]*\n){1,3}[^\n]*BooleanOptionalAction", engine_src) is not None
    )
    files = [ENGINE_ARGS, *server_parser_files(sources)]
    flags: dict[str, dict[str, bool]] = {}
    for path in files:
        tree = trees[path]
        for name, boolean, negatable in [
            *literal_flags(tree, bool_fields, config_bools_negatable),
            *dataclass_flags(tree),
        ]:
            entry = flags.setdefault(name, {"boolean": False})
            entry["boolean"] = entry["boolean"] or boolean
            if negatable:
                flags.setdefault("--no-" + name[2:], {"boolean": True})
    return {
        "vllm": version,
        "sources": files,
        "flags": dict(sorted(flags.items())),
    }


def download(version: str, dest: Path) -> Path:
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
            "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64",
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux1_x86_64",
            f"vllm=={version}", "-d", str(dest),
        ],
        check=True,
    )  # fmt: skip
    return next(dest.glob(f"vllm-{version}-*.whl"))


def write(entry: dict[str, object], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{entry['vllm']}.json"
    path.write_text(json.dumps(entry, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="*", help="vLLM releases to download and catalog")
    parser.add_argument("--wheel", action="append", default=[], type=Path, help="a vllm wheel already on disk")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    wheels: list[Path] = list(args.wheel)
    with tempfile.TemporaryDirectory() as tmp:
        for version in args.versions:
            wheels.append(download(version, Path(tmp)))
        for wheel in wheels:
            entry = catalog(read_sources(wheel), wheel_version(wheel))
            path = write(entry, args.out)
            print(f"{path.name}: {len(entry['flags'])} flags")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
