"""Does a live object already hold what we would apply? (pure; lets a no-op reconcile write nothing)"""

from __future__ import annotations

from typing import Any

from ..api.types import quantity_bytes

# Values under these keys are quantities, which the API server rewrites in canonical form (49152Mi -> 48Gi).
_QUANTITY_KEYS = {"requests", "limits", "capacity", "sizeLimit", "storage"}
# Maps whose every key matters: a selector that gained a key selects other pods.
_EXACT_KEYS = {"selector", "matchLabels", "nodeSelector"}


def _same_quantity(a: Any, b: Any) -> bool:
    try:
        return quantity_bytes(str(a)) == quantity_bytes(str(b))
    except ValueError:
        return False


def contains(live: Any, desired: Any, quantity: bool = False) -> bool:
    """True when every field of `desired` is present and equal in `live` (server defaults are ignored)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return not desired and live is None
        return all(
            (live.get(k) or {}) == v
            if k in _EXACT_KEYS and isinstance(v, dict)
            else contains(live.get(k), v, quantity or k in _QUANTITY_KEYS)
            for k, v in desired.items()
        )
    if isinstance(desired, list):
        if live is None:
            return not desired
        if not isinstance(live, list) or len(live) != len(desired):
            return False
        return all(contains(lv, dv, quantity) for lv, dv in zip(live, desired, strict=True))
    if live == desired:
        return True
    return quantity and _same_quantity(live, desired)
