import pytest

from tests.support.wait import WaitTimeout, wait_for


async def test_returns_the_first_value_that_satisfies_the_predicate() -> None:
    seen = iter(range(10))

    async def fetch() -> int:
        return next(seen)

    assert await wait_for(fetch, lambda v: v >= 3, timeout=5, what="counter", interval=0) == 3


async def test_timeout_reports_the_last_observed_state() -> None:
    async def fetch() -> dict[str, str]:
        return {"phase": "Pending"}

    with pytest.raises(WaitTimeout, match=r"(?s)pod running.*Pending"):
        await wait_for(fetch, lambda v: v["phase"] == "Running", timeout=0.05, what="pod running", interval=0.01)


async def test_listed_errors_are_retried_and_reported() -> None:
    async def fetch() -> int:
        raise LookupError("not there yet")

    with pytest.raises(WaitTimeout, match="LookupError: not there yet"):
        await wait_for(fetch, bool, timeout=0.05, what="x", interval=0.01, retry_on=(LookupError,))
