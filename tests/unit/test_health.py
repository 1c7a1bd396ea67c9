"""The liveness endpoint: 200 while the check finds nothing wrong, 503 with the reason otherwise."""

from __future__ import annotations

import aiohttp

from inference_operator.controller.health import serve_health
from localcluster.cluster import free_port


async def test_healthz_answers_with_the_checks_verdict() -> None:
    problems: list[str] = []
    port = free_port()
    runner = await serve_health(f"127.0.0.1:{port}", lambda: problems[-1] if problems else None)
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as session:
            async with session.get("/healthz") as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
            problems.append("no answer from the API server for 61 s")
            async with session.get("/healthz") as resp:
                assert (resp.status, await resp.text()) == (503, "no answer from the API server for 61 s")
            async with session.get("/other") as resp:
                assert resp.status == 404
    finally:
        await runner.cleanup()
