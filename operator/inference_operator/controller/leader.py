"""Leader election with a coordination.k8s.io Lease: of several replicas only the holder acts."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from . import metrics
from .conditions import parse_time
from .kube import Kube

log = logging.getLogger("inference_operator.leader")


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str, lease_seconds: float) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds

    def _spec(self, now: datetime, previous: dict[str, Any] | None) -> dict[str, Any]:
        taking_over = previous is None or previous.get("holderIdentity") != self.identity
        spec = dict(previous or {})
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=int(self.lease_seconds),
            renewTime=_micro(now),
        )
        if taking_over:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = int((previous or {}).get("leaseTransitions") or 0) + (1 if previous else 0)
        return spec

    async def try_acquire(self) -> bool:
        now = datetime.now(UTC)
        lease = await self.kube.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
        try:
            if lease is None:
                await self.kube.create(
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(now, None),
                    }
                )
                return True
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            renewed = parse_time(spec.get("renewTime"))
            duration = float(spec.get("leaseDurationSeconds") or self.lease_seconds)
            expired = renewed is None or now > renewed + timedelta(seconds=duration)
            if holder not in (None, "", self.identity) and not expired:
                return False
            lease["spec"] = self._spec(now, spec)
            await self.kube.replace(lease)  # resourceVersion makes this a compare-and-swap
            return True
        except ApiException as err:
            if err.status in (409, 422):
                return False
            raise

    async def acquire(self) -> None:
        log.info("waiting for leadership (lease %s/%s)", self.namespace, self.name)
        while not await self.try_acquire():  # noqa: ASYNC110 - the lease lives in the API server, not here
            await asyncio.sleep(self.lease_seconds / 3)
        metrics.LEADER.set(1)
        log.info("leading as %s", self.identity)

    async def keep(self, lost: asyncio.Event) -> None:
        """Renew until a renewal has failed for a whole lease duration; then signal the loss."""
        last_ok = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(self.lease_seconds / 3)
            try:
                ok = await self.try_acquire()
            except Exception:
                log.exception("lease renewal failed")
                ok = False
            if ok:
                last_ok = asyncio.get_running_loop().time()
            elif asyncio.get_running_loop().time() - last_ok > self.lease_seconds * 2 / 3:
                metrics.LEADER.set(0)
                log.error("leadership lost; stopping")
                lost.set()
                return

    async def release(self) -> None:
        lease = await self.kube.get("coordination.k8s.io/v1", "Lease", self.namespace, self.name)
        if lease is not None and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
            lease["spec"]["holderIdentity"] = ""
            try:
                await self.kube.replace(lease)
            except ApiException:
                log.warning("lease not released; it expires by itself")
