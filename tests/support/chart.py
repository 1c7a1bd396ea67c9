"""The Helm chart rendered with the real helm binary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from render_install import ROOT, render

CHART = ROOT / "charts" / "inference-operator"
NAMESPACED_VALUES = CHART / "ci" / "namespaced-values.yaml"


def helm_binary() -> str:
    from localcluster import binaries

    return str(binaries()["helm"])


def rendered(values: list[Path] | None = None, namespace: str = "inference-operator-system") -> list[dict[str, Any]]:
    text = render(helm_binary(), [str(v) for v in values or []], namespace)
    return [d for d in yaml.safe_load_all(text) if d]
