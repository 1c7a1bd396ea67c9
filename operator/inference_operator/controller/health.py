"""The liveness endpoint (/healthz), served from the first moment of the process, leader or standby.

It answers from the operator's own event loop, so an answer at all says the loop is not stuck; the
check adds what else makes the replica alive (for a candidate: the API server answers its election).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


async def serve_health(address: str, problem: Callable[[], str | None]) -> web.AppRunner:
    """Serve GET /healthz on host:port: 200 "ok", or 503 with the problem. Stop it with `cleanup()`."""

    async def healthz(_: web.Request) -> web.Response:
        reason = problem()
        return web.Response(text=reason or "ok", status=503 if reason else 200)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    await web.TCPSite(runner, host or "0.0.0.0", int(port)).start()
    return runner
