"""The InferenceServer samples under examples/, loaded for tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inference_operator.api import InferenceServer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example_paths() -> list[Path]:
    return sorted(EXAMPLES.glob("*.yaml"))


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in example_paths():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "InferenceServer":
                out.append((path.name, doc))
    return out


def example_servers() -> list[tuple[str, InferenceServer]]:
    return [(name, InferenceServer.model_validate(doc)) for name, doc in example_documents()]


def server(spec: dict[str, Any], name: str = "s", namespace: str = "default") -> InferenceServer:
    return InferenceServer.model_validate({"metadata": {"name": name, "namespace": namespace}, "spec": spec})
