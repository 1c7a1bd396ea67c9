"""Finds the control-plane binaries that hack/install-tools builds into the cache."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HACK_DIR = Path(__file__).resolve().parent.parent
INSTALL_TOOLS = HACK_DIR / "install-tools"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "helm")
NODE_BINARIES = ("kubelet", "kube-proxy")


class ToolsMissing(RuntimeError):
    pass


def cache_root() -> Path:
    explicit = os.environ.get("INFERENCE_OPERATOR_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "inference-operator"


def tool_path(build: bool = False) -> list[Path]:
    """The bin folders of every pinned tool; builds missing ones first when `build` is set."""
    args = [str(INSTALL_TOOLS)] if build else [str(INSTALL_TOOLS), "--print-path"]
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ToolsMissing(f"control-plane binaries are not built ({proc.stderr.strip()}); run hack/install-tools")
    return [Path(p) for p in proc.stdout.strip().split(":") if p]


def binaries(build: bool = False) -> dict[str, Path]:
    dirs = tool_path(build=build)
    found: dict[str, Path] = {}
    for name in BINARIES:
        hit = shutil.which(name, path=os.pathsep.join(str(d) for d in dirs))
        if hit is None:
            raise ToolsMissing(f"{name} not found in {dirs}; run hack/install-tools")
        found[name] = Path(hit)
    return found


def node_binaries() -> dict[str, Path]:
    """kubelet and kube-proxy, built by hack/install-tools like the control plane."""
    dirs = tool_path()
    found: dict[str, Path] = {}
    for name in NODE_BINARIES:
        hit = shutil.which(name, path=os.pathsep.join(str(d) for d in dirs))
        if hit is None:
            raise ToolsMissing(f"{name} not found in {dirs}; run hack/install-tools")
        found[name] = Path(hit)
    return found


def standin_images() -> Path:
    """The image archive of the engine stand-ins that real nodes import (hack/build_images.py)."""
    proc = subprocess.run([str(INSTALL_TOOLS), "--print-images"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ToolsMissing(f"the stand-in images are not built ({proc.stderr.strip()}); run hack/install-tools")
    return Path(proc.stdout.strip())
