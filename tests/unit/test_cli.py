import io
import json
from pathlib import Path

import pytest
import yaml

from inference_operator.api.crd import crd_yaml
from inference_operator.cli import main
from tests.support.examples import example_paths


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_render_prints_every_object_of_every_example() -> None:
    paths = [str(p) for p in example_paths()]
    code, out = run("render", *paths)
    assert code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds.count("Deployment") >= len(paths)
    assert "PersistentVolumeClaim" in kinds
    assert "PodDisruptionBudget" in kinds


def test_plan_outputs_json_with_the_resolved_plan() -> None:
    code, out = run("plan", "--output", "json", "--gpu-memory-gib", "80", *map(str, example_paths()))
    assert code == 0
    rows = json.loads(out)
    seventy = next(r for r in rows if r["name"] == "llama-3-3-70b")
    assert (seventy["gpus"], seventy["tensorParallelSize"]) == (8, 8)
    assert seventy["memory"]["maxSequences"] > 0
    assert seventy["command"][:3] == ["vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct"]
    assert seventy["command"][seventy["command"].index("--tensor-parallel-size") + 1] == "8"
    assert all(len(r["revision"]) == 10 for r in rows)


def test_plan_table_lists_each_server() -> None:
    code, out = run("plan", *map(str, example_paths()))
    assert code == 0
    assert out.splitlines()[0].split()[:4] == ["NAME", "MODEL", "VLLM", "GPUS"]


def test_crd_prints_the_generated_definition() -> None:
    assert run("crd") == (0, crd_yaml())


def test_schema_error_is_one_paragraph_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: inference-operator.dev/v1alpha1\nkind: InferenceServer\nmetadata: {name: b}\n"
        "spec: {model: {name: m}, engine: {gpuMemoryUtilization: 2}}\n"
    )
    code, _ = run("plan", str(bad))
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1
    assert "bad.yaml" in err
    assert '"b"' in err
    assert "spec.engine.gpuMemoryUtilization" in err


def test_planner_refusal_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "tp3.yaml"
    bad.write_text(
        "apiVersion: inference-operator.dev/v1alpha1\nkind: InferenceServer\nmetadata: {name: b}\n"
        "spec: {model: {name: meta-llama/Llama-3.1-8B}, engine: {version: 0.10.2, tensorParallelSize: 3},"
        " resources: {gpus: 3}}\n"
    )
    code, _ = run("render", str(bad))
    err = capsys.readouterr().err
    assert code == 1
    assert "spec.engine.tensorParallelSize" in err
    assert "32 attention heads" in err


def test_unreadable_file_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run("plan", "/nonexistent/x.yaml")
    assert code == 1
    assert "cannot read" in capsys.readouterr().err
