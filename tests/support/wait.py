"""Waiting on observed state with a bounded timeout, never on the clock alone."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


class WaitTimeout(AssertionError):
    """Raised when a condition was not reached; the message carries the last observed state."""


def _without_managed_fields(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_managed_fields(v) for k, v in value.items() if k not in ("managedFields", "managed_fields")}
    if isinstance(value, list):
        return [_without_managed_fields(v) for v in value]
    return value


def describe(value: Any, limit: int = 6000) -> str:
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    value = _without_managed_fields(value)
    try:
        text = json.dumps(value, indent=1, default=str, sort_keys=True)
    except TypeError:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


async def wait_for(
    fetch: Callable[[], Awaitable[T]],
    predicate: Callable[[T], bool],
    *,
    timeout: float,
    what: str,
    interval: float = 0.2,
    retry_on: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll `fetch` until `predicate` holds; fail after `timeout` seconds showing what was last seen."""
    deadline = time.monotonic() + timeout
    last: Any = "<nothing observed>"
    while True:
        try:
            value = await fetch()
        except retry_on as err:
            last = f"{type(err).__name__}: {err}"
        else:
            last = value
            if predicate(value):
                return value
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{what}: not reached within {timeout:.0f}s; last observed:\n{describe(last)}")
        await asyncio.sleep(interval)
