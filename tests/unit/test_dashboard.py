import json
from pathlib import Path

DASHBOARD = Path(__file__).resolve().parents[2] / "dashboards" / "inference-operator.json"


def test_dashboard_covers_vllm_and_operator_metrics() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    for metric in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:inter_token_latency_seconds_bucket",
        "inference_operator_rollouts_total",
        "inference_operator_failovers_total",
        "inference_operator_reconcile_errors_total",
    ):
        assert metric in exprs, metric
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
