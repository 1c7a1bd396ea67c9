from pathlib import Path
from typing import Any

from inference_operator.api import crd as crd_module
from inference_operator.api.crd import crd, crd_yaml

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "crds" / "inferenceservers.inference-operator.dev.yaml"


def test_committed_crd_matches_the_models() -> None:
    assert COMMITTED.read_text() == crd_yaml(), (
        "crds/ is stale: run `inference-operator crd > " + str(COMMITTED.relative_to(ROOT)) + "`"
    )


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key in ("properties",):
            for name, sub in node.get(key, {}).items():
                out.extend(_walk(sub, f"{path}.{name}"))
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                out.extend(_walk(node[key], f"{path}[]"))
    return out


def test_schema_is_structural() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node, path
        assert "title" not in node, path
        assert node.get("additionalProperties") is not False, path
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert "anyOf" not in node, path


def test_printer_columns_and_names() -> None:
    spec = crd()["spec"]
    columns = [c["name"] for c in spec["versions"][0]["additionalPrinterColumns"]]
    assert columns[:6] == ["Model", "Backend", "Ready", "Phase", "Endpoint", "Age"]
    assert spec["names"]["shortNames"] == ["isrv", "infsrv"]
    assert spec["versions"][0]["subresources"]["status"] == {}


def test_cel_rules_are_carried_into_the_schema() -> None:
    text = crd_yaml()
    for message in (
        "engine.tensorParallelSize x engine.pipelineParallelSize must equal resources.gpus",
        "set exactly one of size (a new claim) or existingClaim",
        "model is required when the Ollama fallback is enabled",
    ):
        assert message in text


def test_structural_drops_nullable_wrappers() -> None:
    node = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None, "description": "d"}
    assert crd_module.structural(node, {}) == {"type": "integer", "minimum": 1, "description": "d"}
