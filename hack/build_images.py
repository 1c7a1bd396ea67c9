"""Writes the images real nodes of the local cluster run, as one Docker image archive, without a container engine.

No registry is reachable from the local cluster, so every image a real node needs is built here from the engine
stand-ins (hack/standins) and imported into containerd under the names the operator renders:

- vllm/vllm-openai:v<release> for every release of the vLLM flag catalog, each carrying that release's catalog,
  so `vllm serve` refuses what that release refuses;
- registry.example/vllm/vllm-openai:v0.33.0, a stale mirror: vLLM 0.6.0 under a 0.33.0 tag;
- ollama/ollama:<tag> for the operator's default Ollama image, with a static busybox as /bin/sh, because the
  fallback pod runs a shell script;
- the pause image containerd starts every pod sandbox from.

    python3 hack/build_images.py --bin DIR_WITH_STANDINS --out images.tar
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CATALOG_DIR = ROOT / "operator" / "inference_operator" / "planner" / "catalog" / "vllm"
PLANNER_INPUTS = ROOT / "operator" / "inference_operator" / "planner" / "inputs.py"
BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "localhost/inference-operator/pause:standin"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHELL_TOOLS = ("sh", "sleep", "touch", "test", "[", "echo", "cat", "ls", "kill", "true", "false")


@dataclass
class Layer:
    """An uncompressed layer tar, written deterministically (fixed owner and time)."""

    buffer: io.BytesIO = field(default_factory=io.BytesIO)

    def __post_init__(self) -> None:
        self._tar = tarfile.open(fileobj=self.buffer, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name.lstrip("/"))
        info.type, info.mode, info.mtime, info.uid, info.gid = kind, mode, 0, 0, 0
        return info

    def directory(self, name: str, mode: int = 0o755) -> None:
        self._tar.addfile(self._info(name, tarfile.DIRTYPE, mode))

    def file(self, name: str, data: bytes, mode: int = 0o644) -> None:
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = len(data)
        self._tar.addfile(info, io.BytesIO(data))

    def symlink(self, name: str, target: str) -> None:
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)

    def done(self) -> bytes:
        self._tar.close()
        return self.buffer.getvalue()


@dataclass(frozen=True)
class Image:
    tag: str
    layers: tuple[bytes, ...]
    entrypoint: tuple[str, ...]
    env: tuple[str, ...] = (PATH_ENV,)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_archive(images: list[Image], out: Path) -> None:
    """A `docker save` style archive: manifest.json, one config per image, layers shared by digest."""
    manifest = []
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        written: set[str] = set()

        def add(name: str, data: bytes) -> None:
            if name in written:
                return
            written.add(name)
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))

        for image in images:
            layer_names = []
            for layer in image.layers:
                name = f"{_digest(layer)}/layer.tar"
                add(name, layer)
                layer_names.append(name)
            config = {
                "architecture": "amd64",
                "os": "linux",
                "config": {"Env": list(image.env), "Entrypoint": list(image.entrypoint), "WorkingDir": "/"},
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{_digest(layer)}" for layer in image.layers]},
                "history": [{"created_by": "hack/build_images.py"} for _ in image.layers],
            }
            config_bytes = json.dumps(config, sort_keys=True).encode()
            config_name = f"{_digest(config_bytes)}.json"
            add(config_name, config_bytes)
            manifest.append({"Config": config_name, "RepoTags": [image.tag], "Layers": layer_names})
        add("manifest.json", json.dumps(manifest, indent=1).encode())


def _base_layer(binaries: dict[str, bytes]) -> bytes:
    layer = Layer()
    for d in ("/bin", "/etc", "/root", "/usr", "/usr/local", "/usr/local/bin"):
        layer.directory(d)
    layer.directory("/tmp", 0o1777)
    for path, data in binaries.items():
        layer.file(path, data, 0o755)
    return layer.done()


def ollama_tag() -> str:
    match = re.search(r'DEFAULT_OLLAMA_IMAGE\s*=\s*"([^"]+)"', PLANNER_INPUTS.read_text())
    if match is None:
        raise SystemExit(f"DEFAULT_OLLAMA_IMAGE not found in {PLANNER_INPUTS}")
    return match.group(1)


def is_static(path: Path) -> bool:
    """An ELF executable without a program interpreter (PT_INTERP) needs no libraries from the image."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit ELF only
        return False
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    pt_interp = 3
    return all(
        int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little") != pt_interp
        for i in range(phnum)
    )


STALE_RELEASE = "0.6.0"
STALE_MIRROR_IMAGE = "registry.example/vllm/vllm-openai:v0.33.0"


def build(bin_dir: Path) -> list[Image]:
    vllm = _base_layer({"/usr/local/bin/vllm": (bin_dir / "vllm").read_bytes()})
    images = []
    for catalog in sorted(CATALOG_DIR.glob("*.json")):
        flags = Layer()
        flags.directory("/etc/vllm")
        flags.file("/etc/vllm/flags.json", catalog.read_bytes())
        images.append(Image(f"vllm/vllm-openai:v{catalog.stem}", (vllm, flags.done()), ("vllm",)))
    # A mirror that retagged an old release under a new tag: the tag says one release, the engine is another.
    stale = Layer()
    stale.directory("/etc/vllm")
    stale.file("/etc/vllm/flags.json", (CATALOG_DIR / f"{STALE_RELEASE}.json").read_bytes())
    images.append(Image(STALE_MIRROR_IMAGE, (vllm, stale.done()), ("vllm",)))

    if not is_static(BUSYBOX):
        raise SystemExit(f"{BUSYBOX} is not statically linked: install busybox-static")
    shell = Layer()
    shell.directory("/bin")
    shell.file("/bin/busybox", BUSYBOX.read_bytes(), 0o755)
    for tool in SHELL_TOOLS:
        shell.symlink(f"/bin/{tool}", "busybox")
    ollama = _base_layer({"/bin/ollama": (bin_dir / "ollama").read_bytes()})
    images.append(Image(ollama_tag(), (shell.done(), ollama), ("/bin/ollama",), (PATH_ENV, "OLLAMA_HOST=0.0.0.0")))

    pause = _base_layer({"/pause": (bin_dir / "pause").read_bytes()})
    images.append(Image(PAUSE_IMAGE, (pause,), ("/pause",)))
    return images


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=Path, required=True, help="folder with the vllm, ollama and pause stand-ins")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    images = build(args.bin)
    write_archive(images, args.out)
    for image in images:
        print(image.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
