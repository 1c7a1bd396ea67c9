"""Builds the vLLM flag catalog: the command-line flags each vLLM release's OpenAI server accepts.

It reads the release's Python source out of its sdist or any of its wheels and parses it with `ast`;
vllm and torch are never imported (nor installed). The result is committed as data under
operator/inference_operator/planner/catalog/vllm/<version>.json.

    python hack/gen_vllm_flags.py --all                  # every release from 0.6.0 on the package index
    python hack/gen_vllm_flags.py 0.22.0 0.22.1          # these releases
    python hack/gen_vllm_flags.py --file vllm-0.22.0.tar.gz --file vllm-0.15.1-cp38-abi3-manylinux_2_31_x86_64.whl

Files come from the package index pip is configured with (`pip index versions` lists its pages); of
each release the smallest readable file is fetched (the sdist, some tens of MB, against hundreds for
a wheel) and checked against the index's sha256. Nothing is kept unless --cache names a folder.

Flags come from three places, which together make up `vllm serve` across releases:
- literal `add_argument("--flag", "-alias", ...)` calls in the engine arguments and the server's parser;
- `add_argument("--flag", **kwargs["field"])` where the kwargs come from a config dataclass: the
  field's annotation tells whether the flag is boolean (then `--no-flag` exists as well) and its
  values when it is a `Literal` (open to other values when the annotation also allows `str`);
- frontend argument dataclasses whose every field becomes `--field-name`.
The release's FlexibleArgumentParser tells which other spellings vLLM reads (underscores, `-O3`,
`--json-flag.key`), and its quantization package which methods are deprecated.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import html
import json
import os
import re
import ssl
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import urllib.response
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "operator" / "inference_operator" / "planner" / "catalog" / "vllm"
ENGINE_ARGS = "vllm/engine/arg_utils.py"
OLDEST = "0.6.0"  # the oldest release the operator plans for


def server_parser_files(sources: dict[str, str]) -> list[str]:
    """Files that build the OpenAI server's parser (the module moved between releases)."""
    return sorted(
        path
        for path, text in sources.items()
        if path.startswith("vllm/entrypoints/")
        and "run_batch" not in path
        and re.search(r"^def make_arg_parser\(", text, re.MULTILINE)
    )


def read_sources(archive: Path) -> dict[str, str]:
    """The `vllm/**.py` files of a wheel or an sdist, keyed by their path inside the package tree."""
    out: dict[str, str] = {}
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf:
            for name in zf.namelist():
                if name.startswith("vllm/") and name.endswith(".py"):
                    out[name] = zf.read(name).decode("utf-8", errors="replace")
        return out
    with tarfile.open(archive) as tf:
        for member in tf:
            # sdists hold one top folder, vllm-<version>/
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and inner.startswith("vllm/") and inner.endswith(".py"):
                data = tf.extractfile(member)
                if data is not None:
                    out[inner] = data.read().decode("utf-8", errors="replace")
    return out


def archive_version(archive: Path) -> str:
    match = re.match(r"vllm-([^-]+?)(?:\.tar\.gz|(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl)$", archive.name)
    if not match:
        raise SystemExit(f"not a vllm wheel or sdist: {archive.name}")
    return match.group(1)


class SourceTree:
    """A release's modules, parsed on demand: a release has thousands, a catalog needs a few dozen."""

    def __init__(self, sources: dict[str, str]) -> None:
        self.sources = sources
        self._trees: dict[str, ast.Module] = {}
        self._definitions: dict[str, list[ast.expr]] = {}
        self._classes: dict[str, dict[str, ast.expr]] = {}

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.sources[path], filename=path)
        return self._trees[path]

    def _defining(self, name: str, pattern: str) -> list[str]:
        regex = re.compile(pattern, re.MULTILINE)
        return sorted(path for path, text in self.sources.items() if name in text and regex.search(text))

    def class_fields(self, name: str) -> dict[str, ast.expr]:
        """{field: annotation} of the top-level classes called `name`."""
        if name not in self._classes:
            fields: dict[str, ast.expr] = {}
            for path in self._defining(name, rf"^class {re.escape(name)}\b"):
                for node in self.tree(path).body:
                    if isinstance(node, ast.ClassDef) and node.name == name:
                        for stmt in node.body:
                            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                                fields[stmt.target.id] = stmt.annotation
            self._classes[name] = fields
        return self._classes[name]

    def class_def(self, name: str) -> ast.ClassDef | None:
        for path in self._defining(name, rf"^class {re.escape(name)}\b"):
            for node in self.tree(path).body:
                if isinstance(node, ast.ClassDef) and node.name == name:
                    return node
        return None

    def definitions(self, name: str) -> list[ast.expr]:
        """The values bound to `name` at the top level of any module (type aliases, method lists)."""
        if name not in self._definitions:
            values: list[ast.expr] = []
            for path in self._defining(name, rf"^{re.escape(name)}\s*(?::[^=\n]*)?=[^=]"):
                for stmt in self.tree(path).body:
                    if isinstance(stmt, ast.Assign):
                        targets = [_name_of(t) for t in stmt.targets]
                    elif isinstance(stmt, ast.AnnAssign):
                        targets = [_name_of(stmt.target)]
                    else:
                        continue
                    if targets == [name] and stmt.value is not None:
                        values.append(stmt.value)
            self._definitions[name] = values
        return self._definitions[name]


def is_bool_annotation(annotation: str) -> bool:
    return re.search(r"\bbool\b", annotation) is not None


def _name_of(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


@dataclass
class Values:
    """The fixed values an annotation or a `choices=` expression names, and whether others pass too."""

    values: list[str] = field(default_factory=list)
    found: bool = False
    open: bool = False

    def add(self, other: Values) -> None:
        self.values += [v for v in other.values if v not in self.values]
        self.found = self.found or other.found
        self.open = self.open or other.open


class Resolver:
    def __init__(self, tree: SourceTree) -> None:
        self.source = tree

    def lookup(self, name: str, seen: frozenset[str]) -> Values:
        out = Values()
        if name in seen:
            return out
        for value in self.source.definitions(name):
            found = self.values(value, seen | {name})
            if found.found:
                return found
        return out

    def values(self, node: ast.expr, seen: frozenset[str] = frozenset(), annotation: bool = False) -> Values:
        """Values of a literal collection, a `Literal[...]` type or names bound to either. In an annotation a
        string outside `Literal[...]` is a forward reference, not a value."""
        out = Values()
        if isinstance(node, ast.Constant):
            if annotation and isinstance(node.value, str):
                out.add(self.lookup(node.value, seen))
            elif isinstance(node.value, str | int) and not isinstance(node.value, bool):
                out.values, out.found = [str(node.value)], True
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            if not annotation:
                for elt in node.elts:
                    out.add(self.values(elt.value if isinstance(elt, ast.Starred) else elt, seen))
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and not annotation:
                    out.add(Values([key.value], True))
        elif isinstance(node, ast.Subscript):
            base = _name_of(node.value)
            inner = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if base == "Literal":
                for elt in inner:
                    out.add(self.values(elt, seen))
                out.found = True
            elif base in ("Optional", "Union", "SkipValidation"):
                for elt in inner:
                    out.add(self.values(elt, seen, annotation=True))
            elif base == "Annotated":
                out.add(self.values(inner[0], seen, annotation=True))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            out.add(self.values(node.left, seen, annotation=True))
            out.add(self.values(node.right, seen, annotation=True))
        elif isinstance(node, ast.Call) and _name_of(node.func) in ("list", "tuple", "sorted", "get_args", "keys"):
            target = node.args[0] if node.args else node.func.value if isinstance(node.func, ast.Attribute) else None
            if target is not None:
                out.add(self.values(target, seen))
        elif isinstance(node, ast.Name | ast.Attribute):
            name = _name_of(node)
            if name == "str":
                out.open = True
            elif name is not None:
                out.add(self.lookup(name, seen))
        return out


@dataclass
class Flag:
    boolean: bool = False
    aliases: set[str] = field(default_factory=set)
    choices: list[str] | None = None
    other_values: bool = False  # the parser takes values outside `choices` too (vLLM checks them later)
    negates: str | None = None

    def merge(self, other: Flag) -> None:
        self.boolean = self.boolean or other.boolean
        self.aliases |= other.aliases
        if other.choices is not None and self.choices is None:
            self.choices, self.other_values = other.choices, other.other_values

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"boolean": self.boolean}
        if self.negates:
            out["negates"] = self.negates
        if self.aliases:
            out["aliases"] = sorted(self.aliases)
        if self.choices is not None:
            out["choices"] = sorted(self.choices)
            if self.other_values:
                out["other_values"] = True
        return out


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


def _kwargs_field(call: ast.Call) -> tuple[str | None, str] | None:
    """(kwargs variable, config field) behind `**kwargs["field"]`, if that is how the kwargs are passed."""
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
                    return _name_of(value.value), key.value
    return None


def _kwargs_classes(tree: ast.Module, source: SourceTree) -> dict[str, str]:
    """kwargs variable -> config class, from `model_kwargs = get_kwargs(ModelConfig)`."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)
            and node.value.args
        ):
            cls = _name_of(node.value.args[0])
            if cls is not None and source.class_fields(cls):
                out[node.targets[0].id] = cls
    return out


class FlagReader:
    def __init__(self, source: SourceTree, config_bools_negatable: bool) -> None:
        self.source = source
        self.resolver = Resolver(source)
        self.config_bools_negatable = config_bools_negatable

    def annotation_flag(self, annotation: ast.expr | None) -> Flag:
        flag = Flag()
        if annotation is None:
            return flag
        flag.boolean = is_bool_annotation(ast.unparse(annotation))
        if not flag.boolean:
            values = self.resolver.values(annotation, annotation=True)
            if values.found:
                flag.choices, flag.other_values = values.values, values.open
        return flag

    def literal_flags(self, tree: ast.Module) -> Iterator[tuple[str, Flag, bool]]:
        """(flag, facts, negatable) for every add_argument call with a literal long option."""
        kwargs_classes = _kwargs_classes(tree, self.source)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "add_argument":
                continue
            names = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
            ]
            longs = [n for n in names if n.startswith("--")]
            if not longs:
                continue
            flag = Flag(aliases={n for n in names if n != longs[0]})
            flag.boolean, negatable = _keyword_is_boolean_action(node)
            source = _kwargs_field(node)
            if source is not None:
                variable, field_name = source
                cls = kwargs_classes.get(variable or "")
                if cls is not None:
                    from_config = self.annotation_flag(self.source.class_fields(cls).get(field_name))
                    flag.merge(from_config)
                    negatable = negatable or (from_config.boolean and self.config_bools_negatable)
            for kw in node.keywords:
                if kw.arg == "choices":
                    values = self.resolver.values(kw.value)
                    if values.found:
                        flag.choices, flag.other_values = values.values, values.open
            yield longs[0], flag, negatable

    def dataclass_flags(self, tree: ast.Module) -> Iterator[tuple[str, Flag, bool]]:
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
                        flag = self.annotation_flag(stmt.annotation)
                        yield "--" + name.replace("_", "-"), flag, flag.boolean


def _has_dashed_fstring(fn: ast.AST) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                return True
    return False


def optimization_shorthand(parser: ast.ClassDef) -> str | None:
    """The flag that `-O3` stands for where the parser expands it itself."""
    for node in ast.walk(parser):
        if isinstance(node, ast.If) and re.search(r"startswith\('-O'\)", ast.unparse(node.test)):
            for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value.startswith("--"):
                    return inner.value
    return None


def parser_rules(source: SourceTree, files: list[str]) -> dict[str, bool]:
    """How the release's parser reads option names besides their exact spelling."""
    parser = source.class_def("FlexibleArgumentParser")
    parser_source = ast.unparse(parser) if parser is not None else ""
    no_abbrev = "allow_abbrev=False" in parser_source or any(
        re.search(r"allow_abbrev\s*=\s*False", source.sources[f]) for f in files
    )
    return {
        # argparse takes any unambiguous prefix of a long option unless allow_abbrev=False
        "abbreviations": not no_abbrev,
        # FlexibleArgumentParser turns --max_model_len into --max-model-len
        "underscores": ".replace('_', '-')" in parser_source,
        # --compilation-config.level=3 sets one key of a JSON-valued flag
        "dotted_keys": "(?<=--)[^\\\\.]*" in parser_source,
    }


def catalog(sources: dict[str, str], version: str) -> dict[str, object]:
    source = SourceTree(sources)
    engine_src = sources.get(ENGINE_ARGS, "")
    # Releases whose config-to-argparse helper turns booleans into BooleanOptionalAction.
    config_bools_negatable = (
        re.search(r"contains_type\([^)]*bool\)(?:[^\n]*\n){1,3}[^\n]*BooleanOptionalAction", engine_src) is not None
    )
    reader = FlagReader(source, config_bools_negatable)
    files = [ENGINE_ARGS, *server_parser_files(sources)]
    flags: dict[str, Flag] = {}
    negated: set[str] = set()
    for path in files:
        tree = source.tree(path)
        for name, flag, negatable in [*reader.literal_flags(tree), *reader.dataclass_flags(tree)]:
            flags.setdefault(name, Flag()).merge(flag)
            if negatable:
                negated.add(name)
    for name in sorted(negated):
        flags.setdefault("--no-" + name[2:], Flag(boolean=True, negates=name))
    parser = source.class_def("FlexibleArgumentParser")
    shorthand = optimization_shorthand(parser) if parser is not None else None
    if shorthand in flags:
        flags[shorthand].aliases.add("-O")
    deprecated = reader.resolver.lookup("DEPRECATED_QUANTIZATION_METHODS", frozenset())
    allow = "--allow-deprecated-quantization"
    return {
        "vllm": version,
        "sources": files,
        "parser": parser_rules(source, files),
        "deprecated_quantization": sorted(deprecated.values),
        "allow_deprecated_quantization": allow if allow in flags else None,
        "flags": {name: flags[name].as_json() for name in sorted(flags)},
    }


@dataclass(frozen=True)
class IndexFile:
    """One file of a release on the package index (PEP 691 JSON or PEP 503 HTML simple API)."""

    filename: str
    url: str
    size: int | None
    sha256: str | None
    yanked: bool

    @property
    def version(self) -> str | None:
        match = re.match(r"vllm-([^-]+?)(?:\.tar\.gz|\.zip|(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl)$", self.filename)
        return match.group(1) if match else None

    @property
    def readable(self) -> bool:
        return self.filename.endswith((".whl", ".tar.gz"))


def index_pages(project: str = "vllm") -> list[str]:
    """The project pages of the machine's configured package indexes, as pip itself lists them."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", project, "-vv", "--disable-pip-version-check"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    lines = out.splitlines()
    pages: list[str] = []
    for i, line in enumerate(lines):
        if re.match(r"\d+ location\(s\) to search for versions of ", line):
            for follow in lines[i + 1 :]:
                if not follow.startswith("* "):
                    break
                pages.append(follow[2:].strip())
    if not pages:
        raise SystemExit(f"pip listed no index page for {project}")
    return pages


def index_versions(project: str = "vllm") -> list[str]:
    """The releases pip finds on the configured package index, newest first (raises CalledProcessError when
    pip cannot reach it)."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", project, "--disable-pip-version-check"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    for line in out.splitlines():
        if line.startswith("Available versions:"):
            return [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
    raise ValueError(f"pip listed no versions of {project}")


def _open(url: str, accept: str | None = None) -> urllib.response.addinfourl:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    cafile = os.environ.get("PIP_CERT")
    context = ssl.create_default_context(cafile=cafile) if cafile else None
    response: urllib.response.addinfourl = urllib.request.urlopen(request, timeout=120, context=context)
    return response


def index_files(page: str) -> list[IndexFile]:
    with _open(page, "application/vnd.pypi.simple.v1+json, text/html;q=0.1") as response:
        body = response.read().decode()
        kind = response.headers.get("Content-Type", "")
    if "json" in kind:
        return [
            IndexFile(
                filename=f["filename"],
                url=urllib.parse.urljoin(page, f["url"]),
                size=f.get("size"),
                sha256=f.get("hashes", {}).get("sha256"),
                yanked=bool(f.get("yanked")),
            )
            for f in json.loads(body)["files"]
        ]
    files = []
    for attrs, name in re.findall(r"<a\s([^>]*)>([^<]+)</a>", body):
        href = re.search(r'href="([^"]+)"', attrs)
        if href is None:
            continue
        url, _, fragment = html.unescape(href.group(1)).partition("#")
        sha = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else None
        files.append(IndexFile(name.strip(), urllib.parse.urljoin(page, url), None, sha, "data-yanked" in attrs))
    return files


def cheapest_source(files: Iterable[IndexFile], version: str) -> IndexFile:
    """The smallest readable file of a release: the sdist usually, any wheel tag otherwise."""
    candidates = [f for f in files if f.version == version and f.readable and not f.yanked]
    if not candidates:
        raise SystemExit(f"no sdist or wheel of vllm {version} on the package index")
    return min(candidates, key=lambda f: (f.size is None, f.size or 0, f.filename))


def download(file: IndexFile, dest: Path) -> Path:
    path = dest / file.filename
    if not path.exists():
        digest = hashlib.sha256()
        partial = path.with_suffix(path.suffix + ".part")
        with _open(file.url) as response, partial.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if file.sha256 and digest.hexdigest() != file.sha256:
            partial.unlink()
            raise SystemExit(f"{file.filename}: sha256 mismatch")
        partial.rename(path)
    return path


def write(entry: dict[str, object], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{entry['vllm']}.json"
    path.write_text(json.dumps(entry, indent=1) + "\n")
    return path


def release_key(version: str) -> tuple[int, ...] | None:
    """Sort key of a final release (0.10.1.1, 0.6.3.post1); None for pre-releases and other spellings."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(?:\.post(\d+))?", version)
    if match is None:
        return None
    numbers = [int(n) for n in match.group(1).split(".")]
    return (*numbers, *[0] * (4 - len(numbers)), int(match.group(2) or 0))


def releases_on_index(files: Iterable[IndexFile], since: str = OLDEST) -> list[str]:
    """Every final release from `since` on that has a readable file which is not yanked, oldest first."""
    oldest = release_key(since)
    keyed = {
        v: k
        for f in files
        if f.readable and not f.yanked and (v := f.version) is not None and (k := release_key(v)) is not None
    }
    return sorted((v for v, k in keyed.items() if oldest is None or k >= oldest), key=lambda v: keyed[v])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="*", help="vLLM releases to download and catalog")
    parser.add_argument("--all", action="store_true", help=f"every release from {OLDEST} on the package index")
    parser.add_argument("--file", action="append", default=[], type=Path, help="a vllm sdist or wheel already on disk")
    parser.add_argument("--cache", type=Path, help="keep downloads in this folder (default: a temporary one)")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args(argv)
    archives: list[Path] = list(args.file)
    versions: list[str] = list(args.versions)
    with tempfile.TemporaryDirectory() as tmp:
        dest = args.cache or Path(tmp)
        dest.mkdir(parents=True, exist_ok=True)
        if versions or args.all:
            files = [f for page in index_pages() for f in index_files(page)]
            if args.all:
                versions += [v for v in releases_on_index(files) if v not in versions]
            for version in versions:
                archives.append(download(cheapest_source(files, version), dest))
        for archive in archives:
            entry = catalog(read_sources(archive), archive_version(archive))
            path = write(entry, args.out)
            print(f"{path.name}: {len(entry['flags'])} flags from {archive.name}")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
