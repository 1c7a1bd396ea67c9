"""The operator as a separate process against the test cluster, and helpers to drive servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client.api_client import ApiClient

from inference_operator.api import GROUP, PLURAL, VERSION
from localcluster.cluster import free_port
from tests.support.wait import wait_for

MERGE = "application/merge-patch+json"


class OperatorProcess:
    """`inference-operator run` watching one namespace; its metrics are read over HTTP."""

    def __init__(
        self, kubeconfig: Path, namespace: str | None, log_path: Path, *extra: str, env: dict[str, str] | None = None
    ) -> None:
        self.kubeconfig = kubeconfig
        self.namespace = namespace
        self.log_path = log_path
        self.extra = extra
        self.env = env or {}
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [
            sys.executable, "-m", "inference_operator", "run",
            "--kubeconfig", str(self.kubeconfig),
            *(["--namespace", self.namespace] if self.namespace else []),
            "--metrics-address", f"127.0.0.1:{self.metrics_port}",
            "--health-address", f"127.0.0.1:{self.health_port}",
            "--log-format", "plain",
            *self.extra,
        ]  # fmt: skip
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, **self.env}
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()

    def kill(self) -> None:
        """SIGKILL: no cleanup, as when a node dies."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def metrics(self) -> dict[str, float]:
        """Counter samples by their full name with labels, e.g. 'inference_operator_resyncs_total'."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                out[key] = float(value)
        return out

    def health(self, path: str = "/healthz", timeout: float = 5) -> int:
        """The HTTP status of the liveness endpoint; 0 when it does not answer (refused or timed out)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=timeout) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return err.code
        except OSError:
            return 0

    def writes(self) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith("inference_operator_api_writes_total"))

    def reads(self) -> float:
        return sum(v for k, v in self.metrics().items() if k.startswith("inference_operator_api_reads_total"))

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def server_doc(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceServer", "metadata": {"name": name}, "spec": spec}


class Servers:
    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.discovery = client.DiscoveryV1Api(api)
        self.namespace = namespace

    async def create(self, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = await self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, server_doc(name, spec)
        )
        return result

    async def get(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = await self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return result

    async def patch_spec(self, name: str, spec: dict[str, Any]) -> None:
        await self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            name,
            {"spec": spec},
            _content_type=MERGE,  # type: ignore[call-arg]
        )

    async def delete(self, name: str) -> None:
        await self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    async def wait_condition(self, name: str, kind: str, status: str, timeout: float = 60) -> dict[str, Any]:
        def holds(obj: dict[str, Any]) -> bool:
            conds = (obj.get("status") or {}).get("conditions") or []
            return any(c["type"] == kind and c["status"] == status for c in conds)

        return await wait_for(lambda: self.get(name), holds, timeout=timeout, what=f"{name}: {kind}={status}")

    async def wait_status(self, name: str, check: Any, what: str, timeout: float = 60) -> dict[str, Any]:
        return await wait_for(
            lambda: self.get(name),
            lambda o: bool(check(o.get("status") or {})),
            timeout=timeout,
            what=f"{name}: {what}",
        )

    async def deployments(self, name: str) -> list[Any]:
        deps = await self.apps.list_namespaced_deployment(
            self.namespace, label_selector=f"inference-operator.dev/server={name}"
        )
        return list(deps.items)

    async def set_pod_readiness(self, name: str, revision: str, ready: bool) -> int:
        """Steer kwok: pods of a revision report Ready or not, as a failing /health probe would."""
        pods = await self.core.list_namespaced_pod(
            self.namespace,
            label_selector=f"inference-operator.dev/server={name},inference-operator.dev/revision={revision}",
        )
        for pod in pods.items:
            await self.core.patch_namespaced_pod(
                pod.metadata.name, self.namespace,
                {"metadata": {"annotations": {"sim.inference-operator.dev/ready": "true" if ready else "false"}}},
                _content_type=MERGE,  # type: ignore[call-arg]
            )  # fmt: skip
        return len(pods.items)

    async def events(self, name: str) -> list[Any]:
        events = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=InferenceServer"
        )
        return list(events.items)

    async def wait_event(self, name: str, reason: str, timeout: float = 30) -> Any:
        """The first Event of `reason` about a server; the operator posts Events after it writes status."""
        events = await wait_for(
            lambda: self.events(name),
            lambda evs: any(e.reason == reason for e in evs),
            timeout=timeout,
            what=f"{name}: an Event {reason}",
        )
        return next(e for e in events if e.reason == reason)

    async def traffic(self, name: str) -> tuple[dict[str, str], set[str]]:
        """The stable Service's selector and the backends (revision or 'ollama') of its ready endpoints."""
        svc = await self.core.read_namespaced_service(name, self.namespace)
        slices = await self.discovery.list_namespaced_endpoint_slice(
            self.namespace, label_selector=f"kubernetes.io/service-name={name}"
        )
        backends: set[str] = set()
        for sl in slices.items:
            for ep in sl.endpoints or []:
                if ep.target_ref is None or (ep.conditions and ep.conditions.ready is False):
                    continue
                pod_name = ep.target_ref.name
                if pod_name.startswith(f"{name}-ollama-"):
                    backends.add("ollama")
                elif pod_name.startswith(f"{name}-vllm-"):
                    backends.add(pod_name[len(f"{name}-vllm-") :].split("-", 1)[0])
        return dict(svc.spec.selector or {}), backends
