"""`inference-operator plan` on the GPUs users run: the verdicts a real vLLM pod would give."""

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from inference_operator.cli import main


def write(tmp_path: Path, name: str, spec: dict[str, Any]) -> str:
    path = tmp_path / f"{name}.yaml"
    doc = {"apiVersion": "inference-operator.dev/v1alpha1", "kind": "InferenceServer", "metadata": {"name": name}}
    path.write_text(yaml.safe_dump({**doc, "spec": spec}))
    return str(path)


def plan_json(*argv: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    assert main(["plan", "-o", "json", *argv], out=out) == 0
    rows: list[dict[str, Any]] = json.loads(out.getvalue())
    return rows


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["plan", "-o", "json", *argv], out=io.StringIO()) == 1
    return capsys.readouterr().err


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.6.5", "vllm/vllm-openai:v0.22.0"])
def test_qwen_on_an_rtx_4090_at_085(tmp_path: Path, image: str) -> None:
    spec = {
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct"},
        "engine": {"image": image, "gpuMemoryUtilization": 0.85},
        "resources": {"gpus": 1},
    }
    [row] = plan_json("--gpu-product", "NVIDIA-GeForce-RTX-4090", write(tmp_path, "qwen", spec))
    assert row["gpuMemoryGiB"] == pytest.approx(23.99)
    assert row["gpuComputeCapability"] == "8.9"
    assert row["memory"]["weightsGiB"] == pytest.approx(14.19, abs=0.05)
    assert row["memory"]["maxSequences"] >= 1
    assert "--dtype" not in row["command"]


def test_llama3_70b_tp8_on_eight_a100_80gb(tmp_path: Path) -> None:
    spec = {
        "model": {"name": "meta-llama/Meta-Llama-3-70B-Instruct"},
        "engine": {
            "version": "0.6.6.post1",
            "gpuMemoryUtilization": 0.95,
            "tensorParallelSize": 8,
            "maxNumSeqs": 256,
            "maxNumBatchedTokens": 16384,
        },
    }
    [row] = plan_json(
        "--gpu-product", "NVIDIA-A100-SXM4-80GB", "--gpus-per-node", "8", write(tmp_path, "llama70", spec)
    )
    assert (row["gpus"], row["tensorParallelSize"], row["maxModelLen"]) == (8, 8, 8192)
    assert row["memory"]["weightsGiB"] == pytest.approx(70.6e9 * 2 / 8 / 2**30, abs=0.01)
    assert row["memory"]["maxSequences"] > 100


def test_tp3_on_three_2080_ti(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gpu = ["--gpu-product", "NVIDIA-GeForce-RTX-2080-Ti", "--gpus-per-node", "3"]

    def tp3(model: str, **extra: Any) -> dict[str, Any]:
        return {"model": {"name": model, **extra}, "engine": {"version": "0.6.6.post1", "tensorParallelSize": 3}}

    err = refusal(capsys, *gpu, write(tmp_path, "heads", tp3("meta-llama/Llama-3.1-8B-Instruct")))
    assert "does not divide the model's 32 attention heads" in err
    assert "valid sizes on a node of 3 GPUs are 1, 2" in err
    err = refusal(capsys, *gpu, write(tmp_path, "kv", tp3("meta-llama/Llama-3.2-3B-Instruct")))
    assert "8 KV heads" in err
    big = {"parameters": "17B", "layers": 48, "attentionHeads": 48, "kvHeads": 12, "headDim": 128}
    err = refusal(capsys, *gpu, write(tmp_path, "big", tp3("example/dense-17b", architecture=big)))
    assert "the model does not fit" in err
    small = {"parameters": "7B", "layers": 30, "attentionHeads": 30, "kvHeads": 30, "headDim": 128, "maxContext": 4096}
    fitting = tp3("example/dense-7b", architecture=small)
    fitting["engine"]["dtype"] = "float16"
    [row] = plan_json(*gpu, write(tmp_path, "small", fitting))
    assert row["tensorParallelSize"] == 3
    assert row["memory"]["maxSequences"] >= 1
    assert row["command"][row["command"].index("--dtype") + 1] == "float16"


def test_llama31_8b_at_29000_tokens_on_an_rtx_3090_with_vllm_0_6_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine: dict[str, Any] = {"version": "0.6.3.post1", "maxModelLen": 29000}
    spec = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": engine, "resources": {"gpus": 1}}
    err = refusal(capsys, "--gpu-product", "NVIDIA-GeForce-RTX-3090", write(tmp_path, "long", spec))
    assert "spec.engine.maxModelLen" in err
    assert "V0 engine" in err
    # On V1 the profiling step is one batch, not the whole 29000 tokens: the same plan fits.
    v1 = {**spec, "engine": {**engine, "version": "0.10.2"}}
    [row] = plan_json("--gpu-product", "NVIDIA-GeForce-RTX-3090", write(tmp_path, "v1", v1))
    assert row["engine"] == "V1"
    assert row["memory"]["maxSequences"] >= 1


@pytest.mark.parametrize(
    ("model", "weights_gib"),
    [
        ("Qwen/Qwen2.5-7B-Instruct-AWQ", 5.2),
        ("Qwen/Qwen2.5-32B-Instruct-GPTQ-Int8", 32.3),
        ("Qwen/Qwen2.5-32B-Instruct-GPTQ-Int4", 17.9),
        ("unsloth/Meta-Llama-3.1-8B-Instruct-bnb-4bit", 5.6),
    ],
)
def test_quantized_checkpoints_are_sized_from_their_id(tmp_path: Path, model: str, weights_gib: float) -> None:
    spec = {"model": {"name": model}, "engine": {"version": "0.10.2", "maxModelLen": 4096}, "resources": {"gpus": 1}}
    [row] = plan_json("--gpu-product", "NVIDIA-H100-80GB-HBM3", write(tmp_path, "q", spec))
    assert row["memory"]["weightsGiB"] == pytest.approx(weights_gib, abs=0.15)


def test_an_fp8_checkpoint_without_quantization_is_sized_as_fp8_and_fits_an_h200(tmp_path: Path) -> None:
    spec = {
        "model": {"name": "neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8"},
        "engine": {"version": "0.10.2", "maxModelLen": 8192},
        "resources": {"gpus": 1},
    }
    [row] = plan_json("--gpu-product", "NVIDIA-H200", write(tmp_path, "fp8", spec))
    assert row["memory"]["weightsGiB"] == pytest.approx(67.7, abs=0.2)
    assert "weights sized as fp8" in row["sizing"]
    assert "--quantization" not in row["command"]


def test_the_gpu_flags_fill_each_other_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = {"model": {"name": "Qwen/Qwen2.5-1.5B-Instruct"}, "engine": {"version": "0.6.6.post1"}}
    path = write(tmp_path, "small", spec)
    [row] = plan_json("--gpu-product", "Tesla-T4", "--gpu-memory-gib", "14", path)
    assert (row["gpuMemoryGiB"], row["gpuComputeCapability"]) == (14, "7.5")
    assert row["dtype"] == "half"
    [row] = plan_json("--gpu-memory-gib", "24", "--gpu-compute-capability", "8.6", path)
    assert row["dtype"] == "auto"
    err = refusal(capsys, "--gpu-compute-capability", "eight", path)
    assert "--gpu-compute-capability: 'eight' is not a compute capability" in err
    err = refusal(capsys, "--gpu-product", "Imaginary-GPU", path)
    assert "--gpu-product Imaginary-GPU" in err
    assert "NVIDIA-A100-SXM4-80GB" in err


def test_a_v0_refusal_suggests_chunked_prefill(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    engine: dict[str, Any] = {"version": "0.6.3.post1", "maxModelLen": 29000}
    spec = {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, "engine": engine, "resources": {"gpus": 1}}
    err = refusal(capsys, "--gpu-product", "NVIDIA-GeForce-RTX-3090", write(tmp_path, "long", spec))
    assert "--enable-chunked-prefill" in err
    chunked = {**spec, "engine": {**engine, "extraArgs": ["--enable-chunked-prefill"]}}
    [row] = plan_json("--gpu-product", "NVIDIA-GeForce-RTX-3090", write(tmp_path, "chunked", chunked))
    assert row["maxModelLen"] == 29000
