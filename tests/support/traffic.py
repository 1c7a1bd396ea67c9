"""Clients that keep sending OpenAI requests through a Service for a whole scenario and record every answer.

Half the requests are plain completions, half are streamed chat completions (server-sent events, which must end
with `data: [DONE]`). Each request opens a new connection, so every one goes through kube-proxy's choice of
endpoint at that moment. A failure is anything a client would notice: a connection error, a timeout, a non-2xx
status, an answer that names another model id, or a stream that stops before its end. After a failure a client
pauses 100 ms before its next request.

Traffic goes only to this machine: the loopback range, or the cluster's Service and pod ranges, which exist only
in this machine's iptables and in network namespaces the local cluster made.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import json
import time
from dataclasses import dataclass, field

import aiohttp

# The local cluster's Service range and real-node pod range (hack/localcluster); nothing else is a target.
LOCAL_RANGES = tuple(ipaddress.ip_network(n) for n in ("127.0.0.0/8", "::1/128", "10.96.0.0/16", "10.245.0.0/16"))
BACKEND_HEADER = "X-Backend-Model"
FAILURE_PAUSE = 0.1  # seconds a client waits after a failed request
BLIP = 0.5  # seconds: how far request start stamps may be from the moment their connection was opened


def check_local(host: str) -> None:
    address = ipaddress.ip_address(host)
    if not any(address in net for net in LOCAL_RANGES):
        raise ValueError(f"{host} is not an address of this machine's local cluster: traffic is not sent there")


@dataclass(frozen=True)
class Answer:
    """One request: when it started and ended (monotonic seconds), and who answered or what went wrong."""

    kind: str
    started: float
    ended: float
    backend: str | None = None
    model: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class TrafficReport:
    answers: list[Answer] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return len(self.answers)

    @property
    def failures(self) -> list[Answer]:
        return [a for a in self.answers if not a.ok]

    def longest_gap(self) -> float:
        """The longest time without a successful answer completing, between the first and the last one."""
        ends = sorted(a.ended for a in self.answers if a.ok)
        return max((b - a for a, b in itertools.pairwise(ends)), default=0.0)

    def backends(self, blip: float = BLIP) -> list[str]:
        """The backends that answered, in order of request start, consecutive repeats folded.

        A request's start is stamped before the event loop gets to open its connection, so around a switch a few
        requests started a moment earlier can reach the new backend and some started later the old one: phases
        shorter than `blip` seconds are folded into their neighbours.
        """
        ordered = sorted((a for a in self.answers if a.ok and a.backend), key=lambda a: a.started)
        phases: list[tuple[str, float]] = []  # (backend, first start)
        for a in ordered:
            assert a.backend is not None
            if not phases or phases[-1][0] != a.backend:
                phases.append((a.backend, a.started))
        kept: list[str] = []
        for i, (backend, start) in enumerate(phases):
            end = phases[i + 1][1] if i + 1 < len(phases) else float("inf")
            if end - start >= blip and (not kept or kept[-1] != backend):
                kept.append(backend)
        return kept

    def mixed_answers(self, blip: float = BLIP) -> list[Answer]:
        """Answers from an earlier backend to requests started `blip` seconds after a later backend had answered.

        Once a backend's answer has completed, a request started afterwards must not be answered by a backend
        that served before it: clients would see the model change back and forth.
        """
        order: dict[str, int] = {}
        for a in sorted((a for a in self.answers if a.ok and a.backend), key=lambda a: a.ended):
            assert a.backend is not None
            order.setdefault(a.backend, len(order))
        completed = sorted((a.ended, order[a.backend]) for a in self.answers if a.ok and a.backend)
        mixed = []
        for a in self.answers:
            if not a.ok or a.backend is None:
                continue
            newest_before = max((rank for end, rank in completed if end + blip < a.started), default=-1)
            if order[a.backend] < newest_before:
                mixed.append(a)
        return mixed

    def first_answer_after(self, t: float, backend: str) -> float | None:
        times = [a.ended for a in self.answers if a.ok and a.backend == backend and a.started >= t]
        return min(times) if times else None

    def summary(self) -> str:
        fails = self.failures
        kinds: dict[str, int] = {}
        for f in fails:
            key = (f.error or "").split(":")[0]
            kinds[key] = kinds.get(key, 0) + 1
        return (
            f"sent {self.sent}, failed {len(fails)}, longest gap {self.longest_gap():.2f} s, "
            f"backends {self.backends()}, failures by kind {kinds}"
        )

    def failure_lines(self, limit: int = 20) -> str:
        t0 = min((a.started for a in self.answers), default=0.0)
        return "\n".join(
            f"  +{f.started - t0:7.2f}s {f.kind:11} {f.error} (backend {f.backend})" for f in self.failures[:limit]
        )


class Traffic:
    """`clients` concurrent loops against http://host:port until stopped, `max_requests` sent or `max_seconds` past."""

    def __init__(
        self,
        host: str,
        port: int,
        model: str,
        *,
        clients: int = 8,
        max_requests: int = 100000,
        max_seconds: float = 600.0,
        timeout: float = 10.0,
    ) -> None:
        check_local(host)
        self.base = f"http://{host}:{port}"
        self.model = model
        self.clients = clients
        self.max_requests = max_requests
        self.max_seconds = max_seconds
        self.timeout = timeout
        self.report = TrafficReport()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._counter = itertools.count()
        self._session: aiohttp.ClientSession | None = None
        self._deadline = 0.0

    async def __aenter__(self) -> Traffic:
        connector = aiohttp.TCPConnector(force_close=True, limit=0)
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=self.timeout))
        self._deadline = time.monotonic() + self.max_seconds
        self._tasks = [asyncio.create_task(self._loop(i)) for i in range(self.clients)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> TrafficReport:
        self._stop.set()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self._tasks = []
        if self._session is not None:
            await self._session.close()
            self._session = None
        return self.report

    def done(self) -> bool:
        return self._stop.is_set() or all(t.done() for t in self._tasks)

    async def wait_for_answers(self, count: int, timeout: float) -> None:
        """Until `count` more requests have been answered successfully (or fail the scenario)."""
        target = sum(1 for a in self.report.answers if a.ok) + count
        deadline = time.monotonic() + timeout
        while sum(1 for a in self.report.answers if a.ok) < target:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{count} more answers not received within {timeout:.0f}s: {self.report.summary()}"
                )
            if self.done():
                raise AssertionError(f"traffic stopped early: {self.report.summary()}")
            await asyncio.sleep(0.05)

    async def _loop(self, client: int) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            n = next(self._counter)
            if n >= self.max_requests:
                return
            kind = "completion" if (n + client) % 2 == 0 else "chat-stream"
            answer = await self._one(kind)
            self.report.answers.append(answer)
            if not answer.ok:
                # As a client would: a refused connection (a Service without endpoints) is instant, and looping
                # on it would count the client's speed rather than the outage.
                await asyncio.sleep(FAILURE_PAUSE)

    async def _one(self, kind: str) -> Answer:
        assert self._session is not None
        started = time.monotonic()
        backend: str | None = None
        try:
            if kind == "completion":
                body = {"model": self.model, "prompt": "Say hello", "max_tokens": 8}
                async with self._session.post(f"{self.base}/v1/completions", json=body) as resp:
                    backend = resp.headers.get(BACKEND_HEADER)
                    payload = await resp.read()
                    if resp.status // 100 != 2:
                        return self._fail(kind, started, backend, f"HTTP {resp.status}: {payload[:120]!r}")
                    model = json.loads(payload).get("model")
            else:
                body = {"model": self.model, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
                async with self._session.post(f"{self.base}/v1/chat/completions", json=body) as resp:
                    backend = resp.headers.get(BACKEND_HEADER)
                    if resp.status // 100 != 2:
                        text = await resp.read()
                        return self._fail(kind, started, backend, f"HTTP {resp.status}: {text[:120]!r}")
                    model, finished = await _read_stream(resp.content)
                    if not finished:
                        return self._fail(kind, started, backend, "truncated stream: no [DONE]")
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
            return self._fail(kind, started, backend, f"{type(err).__name__}: {err}")
        if model != self.model:
            return self._fail(kind, started, backend, f"wrong model: answered as {model!r}")
        return Answer(kind, started, time.monotonic(), backend=backend, model=model)

    @staticmethod
    def _fail(kind: str, started: float, backend: str | None, error: str) -> Answer:
        return Answer(kind, started, time.monotonic(), backend=backend, error=error)


async def _read_stream(content: aiohttp.StreamReader) -> tuple[str | None, bool]:
    """The model id the chunks name (all must agree) and whether the stream reached `data: [DONE]`."""
    model: str | None = None
    async for raw in content:
        line = raw.decode().strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return model, True
        chunk_model = json.loads(data).get("model")
        if model is not None and chunk_model != model:
            raise ValueError(f"stream switched model id from {model!r} to {chunk_model!r}")
        model = chunk_model
    return model, False
