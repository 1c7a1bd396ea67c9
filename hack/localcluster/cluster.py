"""A real Kubernetes control plane on this machine, with kwok as the kubelet of fake GPU nodes.

etcd, kube-apiserver (RBAC, service accounts, token auth, audit log of writes), kube-controller-manager,
kube-scheduler and kwok run as local processes; with `real_nodes=1` a real node joins them (realnode.py).
Their state lives in one folder per cluster name; `down` stops every process it started, undoes what the real
node changed on the machine and removes that folder.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from .pki import Pki, make_pki
from .realnode import RealNode, RealNodeError
from .shape import ClusterShape, default_shape
from .tools import binaries, cache_root, node_binaries, standin_images

KWOK_CONFIG = Path(__file__).resolve().parent / "kwok-config.yaml"
KWOK_STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
START_ORDER = (*CONTROL_PLANE, "containerd", "kubelet", "kube-proxy")
# Node components find runc, the containerd shim, iptables and mount through PATH.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
        {"level": "None"},
    ],
}


JSON = "application/json"
MERGE = "application/merge-patch+json"


class ClusterError(RuntimeError):
    pass


@dataclass
class ClusterInfo:
    name: str
    state_dir: str
    kubeconfig: str
    server: str
    audit_log: str
    pids: dict[str, int]

    def save(self) -> None:
        Path(self.state_dir, "state.json").write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, state_dir: Path) -> ClusterInfo:
        return cls(**json.loads((state_dir / "state.json").read_text()))


def default_state_root() -> Path:
    return cache_root() / "clusters"


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free port below the kernel's ephemeral range: between this check and the server binding it, an outgoing
    connection (of which a cluster makes many) could otherwise take it as its source port."""
    low, high = 10000, min(_ephemeral_floor(), 32768)
    rng = secrets.SystemRandom()
    for _ in range(200 if high > low else 0):
        port = rng.randrange(low, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


def _die_with_parent() -> None:
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _pid_is_ours(pid: int, state_dir: Path) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return False
    return str(state_dir) in cmdline


def _poll(what: str, check: Callable[[], bool], timeout: float, interval: float = 0.25) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if check():
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class LocalCluster:
    def __init__(
        self,
        name: str = "default",
        state_root: Path | None = None,
        shape: ClusterShape | None = None,
        real_nodes: int = 0,
    ) -> None:
        if real_nodes not in (0, 1):
            raise ClusterError("one machine runs at most 1 real node (--real-nodes 0 or 1): they would share iptables")
        self.name = name
        self.state_dir = (state_root or default_state_root()) / name
        self.shape = shape or default_shape()
        self.real_nodes = real_nodes
        self._admin_token = ""
        self._ssl: ssl.SSLContext | None = None
        self._server = ""

    # ---- public API -------------------------------------------------------------------------
    def up(self, tie_to_parent: bool = False, timeout: float = 120.0) -> ClusterInfo:
        """Start the control plane; return once nodes are Ready and service accounts work."""
        if (self.state_dir / "state.json").exists():
            info = ClusterInfo.load(self.state_dir)
            if all(_pid_alive(p) for p in info.pids.values()):
                raise ClusterError(f"cluster {self.name!r} is already up (kubeconfig {info.kubeconfig})")
            self.down()
        bins = binaries()
        if self.real_nodes:
            bins.update(node_binaries())
        shutil.rmtree(self.state_dir, ignore_errors=True)
        for sub in ("pki", "etcd", "logs"):
            (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
        pki = make_pki(self.state_dir / "pki")
        components = ["admin", "controller-manager", "scheduler", "kwok"] + (["node"] if self.real_nodes else [])
        tokens = {c: secrets.token_hex(16) for c in components}
        self._admin_token = tokens["admin"]
        self._write_token_file(tokens)
        port_names = ["etcd", "etcd-peer", "apiserver", "kcm", "scheduler", "kwok"]
        if self.real_nodes:
            port_names += ["kubelet", "kubelet-healthz", "kube-proxy-healthz", "kube-proxy-metrics"]
        ports = {k: free_port() for k in port_names}
        self._server = f"https://127.0.0.1:{ports['apiserver']}"
        kubeconfigs = {
            user: self._write_kubeconfig(self.state_dir / f"{user}.kubeconfig", user, token, pki)
            for user, token in tokens.items()
        }
        audit_log = self.state_dir / "logs" / "audit.log"
        (self.state_dir / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
        (self.state_dir / "kwok.yaml").write_text(KWOK_CONFIG.read_text() + "---\n" + KWOK_STAGES.read_text())

        info = ClusterInfo(
            name=self.name,
            state_dir=str(self.state_dir),
            kubeconfig=str(kubeconfigs["admin"]),
            server=self._server,
            audit_log=str(audit_log),
            pids={},
        )
        self._ssl = ssl.create_default_context(cafile=str(pki.ca_cert))
        try:
            self._start(info, "etcd", self._etcd_args(bins["etcd"], ports), tie_to_parent)
            etcd_health = f"http://127.0.0.1:{ports['etcd']}/health"
            _poll("etcd", lambda: self._alive(info) and self._http_ok(etcd_health), 30)
            apiserver = self._apiserver_args(bins["kube-apiserver"], ports, pki, audit_log)
            self._start(info, "kube-apiserver", apiserver, tie_to_parent)
            readyz = f"{self._server}/readyz"
            _poll("kube-apiserver /readyz", lambda: self._alive(info) and self._http_ok(readyz), 90)
            kcm = self._controller_manager_args(bins["kube-controller-manager"], ports, pki, kubeconfigs)
            self._start(info, "kube-controller-manager", kcm, tie_to_parent)
            sched = self._scheduler_args(bins["kube-scheduler"], ports, kubeconfigs)
            self._start(info, "kube-scheduler", sched, tie_to_parent)
            kwok = [
                str(bins["kwok"]),
                f"--kubeconfig={kubeconfigs['kwok']}",
                f"--config={self.state_dir / 'kwok.yaml'}",
                f"--server-address=127.0.0.1:{ports['kwok']}",
            ]
            self._start(info, "kwok", kwok, tie_to_parent)
            self._create_nodes()
            _poll("nodes Ready", lambda: self._alive(info) and self._nodes_ready(), timeout)
            _poll("default service account", lambda: self._alive(info) and self._default_sa_exists(), timeout)
            if self.real_nodes:
                self._start_real_node(info, bins, pki, kubeconfigs["node"], ports, tie_to_parent, timeout)
        except BaseException:
            self.down(keep_logs=True)
            raise
        return info

    def _start_real_node(
        self,
        info: ClusterInfo,
        bins: dict[str, Path],
        pki: Pki,
        kubeconfig: Path,
        ports: dict[str, int],
        tie_to_parent: bool,
        timeout: float,
    ) -> None:
        node = RealNode(self.state_dir)
        commands = node.prepare(pki, kubeconfig, ports)
        env = {**os.environ, "PATH": f"{SYSTEM_PATH}:{os.environ.get('PATH', '')}"}
        for component in ("containerd", "kubelet", "kube-proxy"):
            commands[component][0] = str(bins.get(component) or shutil.which(component, path=env["PATH"]))
        self._start(info, "containerd", commands["containerd"], tie_to_parent, env)
        _poll("containerd", lambda: self._alive(info) and node.containerd_ready(), 30)
        node.import_images(standin_images())
        self._start(info, "kubelet", commands["kubelet"], tie_to_parent, env)
        name = node.config.name
        _poll(f"node {name} registered", lambda: self._alive(info) and self._node_exists(name), timeout)
        code, _ = self._request("PATCH", f"/api/v1/nodes/{name}/status", node.gpu_patch(), MERGE)
        if code != 200:
            raise ClusterError(f"advertising fake GPUs on {name} failed with HTTP {code}")
        self._start(info, "kube-proxy", commands["kube-proxy"], tie_to_parent, env)
        healthz = f"http://127.0.0.1:{ports['kube-proxy-healthz']}/healthz"
        _poll("kube-proxy", lambda: self._alive(info) and self._http_ok(healthz), timeout)
        _poll(f"node {name} Ready with GPUs", lambda: self._alive(info) and self._real_node_ready(name), timeout)

    def down(self, keep_logs: bool = False) -> None:
        """Stop every process of this cluster (TERM, then KILL), undo the real node's changes, remove its state."""
        state = self.state_dir / "state.json"
        if state.exists():
            info = ClusterInfo.load(self.state_dir)
            # Processes started against this cluster (hack/quickstart's operator) stop first.
            attached = [int(p.read_text()) for p in self.state_dir.glob("*.pid") if p.read_text().strip().isdigit()]
            pids = attached + [info.pids[c] for c in reversed(START_ORDER) if c in info.pids]
            live = [p for p in pids if _pid_alive(p) and _pid_is_ours(p, self.state_dir)]
            for pid in live:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            with contextlib.suppress(ClusterError):
                _poll("processes to stop", lambda: not any(_pid_alive(p) for p in live), 15, 0.1)
            for pid in live:
                if _pid_alive(pid):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            _poll("processes to die", lambda: not any(_pid_alive(p) for p in live), 10, 0.1)
        if (self.state_dir / "node").exists():
            problems = RealNode(self.state_dir).cleanup()
            if problems:
                raise RealNodeError("the real node left things behind:\n" + "\n".join(problems))
        if keep_logs:
            for sub in ("etcd", "pki"):
                shutil.rmtree(self.state_dir / sub, ignore_errors=True)
            state.unlink(missing_ok=True)
        else:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def status(self) -> dict[str, Any]:
        state = self.state_dir / "state.json"
        if not state.exists():
            return {"name": self.name, "up": False}
        info = ClusterInfo.load(self.state_dir)
        processes = {c: _pid_alive(p) and _pid_is_ours(p, self.state_dir) for c, p in info.pids.items()}
        return {
            "name": self.name,
            "up": all(processes.values()),
            "kubeconfig": info.kubeconfig,
            "server": info.server,
            "processes": processes,
        }

    # ---- processes ---------------------------------------------------------------------------
    def _start(
        self,
        info: ClusterInfo,
        component: str,
        args: list[str],
        tie_to_parent: bool,
        env: dict[str, str] | None = None,
    ) -> None:
        log = open(self.state_dir / "logs" / f"{component}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if tie_to_parent else None,
            cwd=self.state_dir,
            env=env,
        )
        log.close()
        info.pids[component] = proc.pid
        info.save()
        if proc.poll() is not None:
            raise ClusterError(f"{component} exited at once:\n{self._log_tail(component)}")

    def _alive(self, info: ClusterInfo) -> bool:
        """True while every started process runs; raises with its log when one has exited."""
        for component, pid in info.pids.items():
            if not _pid_alive(pid):
                raise ClusterError(f"{component} exited:\n{self._log_tail(component)}")
        return True

    def _log_tail(self, component: str, lines: int = 30) -> str:
        path = self.state_dir / "logs" / f"{component}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def _etcd_args(self, etcd: Path, ports: dict[str, int]) -> list[str]:
        client = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        return [
            str(etcd),
            "--name=localcluster",
            f"--data-dir={self.state_dir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=localcluster={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_args(self, binary: Path, ports: dict[str, int], pki: Pki, audit_log: Path) -> list[str]:
        return [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            f"--token-auth-file={self.state_dir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            f"--audit-policy-file={self.state_dir / 'audit-policy.yaml'}",
            f"--audit-log-path={audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--profiling=false",
            "--v=0",
            *(
                [
                    f"--kubelet-certificate-authority={pki.ca_cert}",
                    f"--kubelet-client-certificate={pki.kubelet_client_cert}",
                    f"--kubelet-client-key={pki.kubelet_client_key}",
                    "--kubelet-preferred-address-types=InternalIP",
                ]
                if self.real_nodes
                else []
            ),
        ]

    def _controller_manager_args(
        self, binary: Path, ports: dict[str, int], pki: Pki, kubeconfigs: dict[str, Path]
    ) -> list[str]:
        kc = kubeconfigs["controller-manager"]
        return [
            str(binary),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['kcm']}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca_cert}",
            "--use-service-account-credentials=true",
            "--controllers=*",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def _scheduler_args(self, binary: Path, ports: dict[str, int], kubeconfigs: dict[str, Path]) -> list[str]:
        kc = kubeconfigs["scheduler"]
        return [
            str(binary),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['scheduler']}",
            "--leader-elect=false",
            "--profiling=false",
        ]

    # ---- files ---------------------------------------------------------------------------------
    def _write_token_file(self, tokens: dict[str, str]) -> None:
        users = {
            "admin": ("admin", "system:masters"),
            "controller-manager": ("system:kube-controller-manager", ""),
            "scheduler": ("system:kube-scheduler", ""),
            "kwok": ("kwok-controller", "system:masters"),
            "node": ("system:node:real-0", "system:masters"),
        }
        rows = []
        for component, token in tokens.items():
            user, group = users[component]
            rows.append(f"{token},{user},{user}" + (f',"{group}"' if group else ""))
        path = self.state_dir / "tokens.csv"
        path.write_text("\n".join(rows) + "\n")
        path.chmod(0o600)

    def _write_kubeconfig(self, path: Path, user: str, token: str, pki: Pki) -> Path:
        ca = base64.b64encode(pki.ca_cert.read_bytes()).decode()
        context = f"localcluster-{self.name}"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self._server, "certificate-authority-data": ca}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": user}}],
            "current-context": context,
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    # ---- API calls -----------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, content_type: str = JSON) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self._server}{path}", data=data, method=method)
        req.add_header("Authorization", f"Bearer {self._admin_token}")
        req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, context=self._ssl, timeout=10) as resp:
                raw = resp.read()
                is_json = resp.headers.get_content_type() == "application/json"
                return resp.status, json.loads(raw) if is_json and raw else raw
        except urllib.error.HTTPError as err:
            return err.code, None

    def _http_ok(self, url: str) -> bool:
        try:
            if url.startswith("https"):
                return self._request("GET", url.removeprefix(self._server))[0] == 200
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _create_nodes(self) -> None:
        for node in self.shape.manifests():
            code, _ = self._request("POST", "/api/v1/nodes", node)
            if code not in (201, 409):
                raise ClusterError(f"creating node {node['metadata']['name']} failed with HTTP {code}")

    def _nodes_ready(self) -> bool:
        code, body = self._request("GET", "/api/v1/nodes?labelSelector=type%3Dkwok")
        if code != 200:
            return False
        ready = [
            n
            for n in body["items"]
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
            and not n["spec"].get("taints")  # the not-ready taint goes once node lifecycle has seen it Ready
        ]
        return len(ready) == self.shape.node_count()

    def _node_exists(self, name: str) -> bool:
        return self._request("GET", f"/api/v1/nodes/{name}")[0] == 200

    def _real_node_ready(self, name: str) -> bool:
        code, node = self._request("GET", f"/api/v1/nodes/{name}")
        if code != 200:
            return False
        status = node["status"]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
        return ready and "nvidia.com/gpu" in status.get("allocatable", {})

    def _default_sa_exists(self) -> bool:
        return self._request("GET", "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200
