"""A real node next to the kwok ones: containerd and runc, a kubelet with a bridge CNI network, and kube-proxy
in iptables mode, registered to the local API server. Its pods really run (the images are the engine stand-ins,
imported, never pulled), its Services really answer on their ClusterIPs from this machine.

The node advertises fake GPUs (the extended resource is patched into its status, as the spike of the data-plane
issue proved the kubelet admits) and the GPU discovery labels of the kwok GPU nodes; it is tainted so that only
pods which tolerate REAL_NODE_TAINT land there. Everything it changes on the machine is undone by `cleanup`:
processes, mounts, network namespaces, the bridge, iptables rules, cgroups and the sysctls it set.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .pki import Pki, make_kubelet_serving_cert

REAL_NODE_LABEL = "inference-operator.dev/real-node"
REAL_NODE_TAINT = {"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}
PAUSE_IMAGE = "localhost/inference-operator/pause:standin"
BRIDGE = "iop0"
POD_CIDR = "10.245.0.0/24"
CLUSTER_POD_CIDR = "10.245.0.0/16"
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Sysctls the node needs; their earlier values are put back by cleanup.
SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/bridge/bridge-nf-call-iptables": "1",
}
COMPONENTS = ("containerd", "kubelet", "kube-proxy")


class RealNodeError(RuntimeError):
    pass


def node_ip() -> str:
    """The address of the default route's interface: where the API server reaches the kubelet."""
    out = subprocess.run(["ip", "-4", "-o", "route", "get", "192.0.2.255"], capture_output=True, text=True)
    words = out.stdout.split()
    if out.returncode == 0 and "src" in words:
        return words[words.index("src") + 1]
    return "127.0.0.1"


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key


def _run(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check, timeout=60)


@dataclass(frozen=True)
class RealNodeConfig:
    name: str = "real-0"
    gpus: int = 8
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    gpu_family: str = "hopper"

    def labels(self) -> dict[str, str]:
        return {
            REAL_NODE_LABEL: "true",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(self.gpus),
            "nvidia.com/gpu.product": self.gpu_product,
            "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
            "nvidia.com/gpu.family": self.gpu_family,
        }


class RealNode:
    """Files, processes and host changes of one real node of a local cluster, all kept under `state_dir/node`."""

    def __init__(self, state_dir: Path, config: RealNodeConfig | None = None) -> None:
        self.config = config or RealNodeConfig()
        self.dir = state_dir / "node"
        self.cluster_dir = state_dir
        self.cgroup_root = f"/inference-operator-{state_dir.name}"
        self.socket = self.dir / "containerd.sock"

    # ---- setup -------------------------------------------------------------------------------
    def prepare(self, pki: Pki, kubeconfig: Path, ports: dict[str, int]) -> dict[str, list[str]]:
        """Write every config file, record the host state cleanup restores, and return each component's command."""
        if _run("ip", "link", "show", BRIDGE).returncode == 0:
            raise RealNodeError(
                f"another real node runs on this machine (its bridge {BRIDGE} exists): one at a time, since they "
                "would share iptables; stop it with `hack/cluster --name NAME down`"
            )
        for sub in ("containerd", "cni", "kubelet", "ipam", "logs"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        self._record_host_state()
        self._make_cgroups()
        for name, value in SYSCTLS.items():
            with contextlib.suppress(OSError):
                _sysctl_path(name).write_text(value)
        ip = node_ip()
        cert, key = make_kubelet_serving_cert(pki.ca_cert.parent, self.config.name, ip)
        (self.dir / "containerd.toml").write_text(self._containerd_config())
        (self.dir / "cni" / "10-bridge.conflist").write_text(json.dumps(self._cni_config(), indent=1))
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump(self._kubelet_config(pki, cert, key, ip, ports)))
        (self.dir / "kube-proxy.yaml").write_text(yaml.safe_dump(self._kube_proxy_config(kubeconfig, ports)))
        return {
            "containerd": ["containerd", f"--config={self.dir / 'containerd.toml'}"],
            "kubelet": [
                "kubelet",
                f"--config={self.dir / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={self.dir / 'kubelet'}",
                f"--hostname-override={self.config.name}",
                f"--node-ip={ip}",
                "--node-labels=" + ",".join(f"{k}={v}" for k, v in self.config.labels().items()),
                "--v=1",
            ],
            "kube-proxy": ["kube-proxy", f"--config={self.dir / 'kube-proxy.yaml'}", "--v=1"],
        }

    def import_images(self, archive: Path) -> None:
        proc = _run("ctr", f"--address={self.socket}", "-n", "k8s.io", "images", "import", str(archive))
        if proc.returncode != 0:
            raise RealNodeError(f"importing {archive} into containerd failed: {proc.stderr.strip()}")

    def containerd_ready(self) -> bool:
        return self.socket.exists() and _run("ctr", f"--address={self.socket}", "version").returncode == 0

    def gpu_patch(self) -> dict[str, Any]:
        gpus = {"nvidia.com/gpu": str(self.config.gpus)}
        return {"status": {"capacity": gpus, "allocatable": gpus}}

    def _containerd_config(self) -> str:
        d = self.dir / "containerd"
        cri = {
            "sandbox_image": PAUSE_IMAGE,
            # The machine has no CAP_SYS_RESOURCE for lowering OOM scores below containerd's own.
            "restrict_oom_score_adj": True,
            "disable_apparmor": True,
            # Pod network namespaces live under the state folder, so teardown finds every one of them.
            "netns_mounts_under_state_dir": True,
            "containerd": {
                "snapshotter": "overlayfs",
                "default_runtime_name": "runc",
                "runtimes": {
                    "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": False}},
                },
            },
            "cni": {"bin_dir": "/usr/lib/cni", "conf_dir": str(self.dir / "cni")},
        }
        config = {
            "version": 2,
            "root": str(d / "root"),
            "state": str(d / "state"),
            "disabled_plugins": [
                "io.containerd.snapshotter.v1.aufs",
                "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.zfs",
                "io.containerd.snapshotter.v1.devmapper",
                "io.containerd.tracing.processor.v1.otlp",
            ],
            "grpc": {"address": str(self.socket)},
            "ttrpc": {"address": str(self.socket) + ".ttrpc"},
            "plugins": {
                "io.containerd.grpc.v1.cri": cri,
                "io.containerd.internal.v1.opt": {"path": str(d / "opt")},
            },
        }
        return _toml(config)

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "0.4.0",
            "name": "inference-operator",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    # No masquerading: pods only talk to this machine and each other, and no rule is left behind.
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "dataDir": str(self.dir / "ipam"),
                    },
                }
            ],
        }

    def _kubelet_config(self, pki: Pki, cert: Path, key: Path, ip: str, ports: dict[str, int]) -> dict[str, Any]:
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": ip,
            "port": ports["kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": ports["kubelet-healthz"],
            "tlsCertFile": str(cert),
            "tlsPrivateKeyFile": str(key),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(pki.ca_cert)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": self.cgroup_root,
            "failCgroupV1": False,
            "failSwapOn": False,
            "registerWithTaints": [REAL_NODE_TAINT],
            "resolvConf": "",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "nodeStatusUpdateFrequency": "5s",
            "serializeImagePulls": False,
            "volumePluginDir": str(self.dir / "volume-plugins"),
            "podLogsDir": str(self.dir / "pod-logs"),
            "maxPods": 110,
        }

    def _kube_proxy_config(self, kubeconfig: Path, ports: dict[str, int]) -> dict[str, Any]:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "mode": "iptables",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "hostnameOverride": self.config.name,
            "clusterCIDR": CLUSTER_POD_CIDR,
            "healthzBindAddress": f"127.0.0.1:{ports['kube-proxy-healthz']}",
            "metricsBindAddress": f"127.0.0.1:{ports['kube-proxy-metrics']}",
            "iptables": {"minSyncPeriod": "0s", "syncPeriod": "30s", "localhostNodePorts": False},
            "nodePortAddresses": ["primary"],
            # Leave the machine's conntrack sysctls as they are.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
        }

    # ---- host state ----------------------------------------------------------------------------
    def _record_host_state(self) -> None:
        state: dict[str, Any] = {
            "sysctls": {},
            "iptables": {cmd: _save(cmd) for cmd in ("iptables-save", "ip6tables-save")},
        }
        for key in SYSCTLS:
            with contextlib.suppress(OSError):
                state["sysctls"][key] = _sysctl_path(key).read_text().strip()
        (self.dir / "host-before.json").write_text(json.dumps(state, indent=1))

    def _hierarchies(self) -> list[Path]:
        """Each mounted cgroup hierarchy (v1 controllers, the named systemd one, the unified one)."""
        found = []
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if fields[2] in ("cgroup", "cgroup2"):
                found.append(Path(fields[1]))
        return found

    def _make_cgroups(self) -> None:
        # The kubelet refuses to start unless its cgroupRoot exists in every v1 hierarchy; a new cpuset cgroup has
        # no CPUs or memory nodes until given its parent's.
        for hierarchy in self._hierarchies():
            path = hierarchy / self.cgroup_root.lstrip("/")
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / knob).exists():
                    (path / knob).write_text((hierarchy / knob).read_text())

    # ---- teardown ------------------------------------------------------------------------------
    def cleanup(self) -> list[str]:
        """Undo everything the node did on this machine; return what could not be undone."""
        problems: list[str] = []
        self._kill_cgroup_processes()
        self._kill_processes_under(self.cluster_dir)
        problems += self._unmount_under(self.dir)
        before = self._before()
        problems += self._remove_bridge()
        for cmd, saved in before.get("iptables", {}).items():
            problems += _restore_rules(cmd, saved)
        for key, value in before.get("sysctls", {}).items():
            with contextlib.suppress(OSError):
                _sysctl_path(key).write_text(value)
        problems += self._remove_cgroups()
        return problems

    def _before(self) -> dict[str, Any]:
        path = self.dir / "host-before.json"
        if not path.exists():
            return {}
        before: dict[str, Any] = json.loads(path.read_text())
        return before

    def _cgroup_dirs(self) -> list[Path]:
        dirs = []
        for hierarchy in self._hierarchies():
            root = hierarchy / self.cgroup_root.lstrip("/")
            if root.is_dir():
                dirs += sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
                dirs.append(root)
        return dirs

    def _kill_cgroup_processes(self) -> None:
        for _ in range(50):
            pids = set()
            for d in self._cgroup_dirs():
                with contextlib.suppress(OSError):
                    pids |= {int(p) for p in (d / "cgroup.procs").read_text().split()}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def _kill_processes_under(self, directory: Path) -> None:
        """Shims and anything else started with this cluster's folder on its command line."""
        marker = str(directory).encode()
        for _ in range(50):
            pids = []
            for proc in Path("/proc").iterdir():
                if proc.name.isdigit() and int(proc.name) != os.getpid():
                    with contextlib.suppress(OSError):
                        if marker in proc.joinpath("cmdline").read_bytes():
                            pids.append(int(proc.name))
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)

    def _unmount_under(self, directory: Path) -> list[str]:
        problems = []
        for _ in range(5):
            points = [p for p in _mount_points() if p == str(directory) or p.startswith(str(directory) + "/")]
            if not points:
                return []
            for point in sorted(points, key=len, reverse=True):
                proc = _run("umount", "-l", point)
                if proc.returncode != 0:
                    problems.append(f"umount {point}: {proc.stderr.strip()}")
        return problems

    def _remove_bridge(self) -> list[str]:
        if _run("ip", "link", "show", BRIDGE).returncode != 0:
            return []
        for line in _run("ip", "-o", "link", "show", "master", BRIDGE).stdout.splitlines():
            veth = line.split(":")[1].strip().split("@")[0]
            _run("ip", "link", "delete", veth)
        proc = _run("ip", "link", "delete", BRIDGE)
        return [] if proc.returncode == 0 else [f"ip link delete {BRIDGE}: {proc.stderr.strip()}"]

    def _remove_cgroups(self) -> list[str]:
        problems = []
        for d in self._cgroup_dirs():
            try:
                d.rmdir()
            except OSError as err:
                problems.append(f"rmdir {d}: {err}")
        return problems


def _mount_points() -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        points.append(point.encode().decode("unicode_escape"))
    return points


def _save(cmd: str) -> str:
    if shutil.which(cmd) is None:
        return ""
    return _run(cmd).stdout


def parse_rules(saved: str) -> dict[str, tuple[list[str], list[str]]]:
    """iptables-save text -> {table: (chains, rules)} without counters."""
    tables: dict[str, tuple[list[str], list[str]]] = {}
    table = ""
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:]
            tables.setdefault(table, ([], []))
        elif line.startswith(":") and table:
            tables[table][0].append(line[1:].split()[0])
        elif line.startswith("-A ") and table:
            tables[table][1].append(line)
    return tables


def _restore_rules(save_cmd: str, before_text: str) -> list[str]:
    """Delete the rules and chains that were not there before (a restore script, applied at once)."""
    if not before_text and shutil.which(save_cmd) is None:
        return []
    before, now = parse_rules(before_text), parse_rules(_save(save_cmd))
    script = []
    for table, (chains, rules) in now.items():
        old_chains, old_rules = before.get(table, ([], []))
        new_chains = [c for c in chains if c not in old_chains]
        remaining = list(old_rules)
        deletes = []
        for rule in rules:
            if rule in remaining:
                remaining.remove(rule)
            elif rule.split()[1] not in new_chains:
                deletes.append("-D " + rule[3:])
        if not deletes and not new_chains:
            continue
        script.append(f"*{table}")
        script += deletes
        script += [f"-F {c}" for c in new_chains]
        script += [f"-X {c}" for c in new_chains]
        script.append("COMMIT")
    if not script:
        return []
    restore = save_cmd.replace("-save", "-restore")
    proc = subprocess.run([restore, "--noflush"], input="\n".join(script) + "\n", capture_output=True, text=True)
    if proc.returncode != 0:
        return [f"{restore}: {proc.stderr.strip()} (script: {shlex.join(script)[:500]})"]
    return []


def _toml(config: dict[str, Any]) -> str:
    """The small TOML subset containerd's config needs: scalars, lists of strings, nested tables."""

    def scalar(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, list):
            return "[" + ", ".join(json.dumps(x) for x in v) + "]"
        return json.dumps(str(v))

    lines: list[str] = []

    def table(prefix: list[str], body: dict[str, Any]) -> None:
        scalars = {k: v for k, v in body.items() if not isinstance(v, dict)}
        if prefix:
            lines.append("[" + ".".join(json.dumps(p) if "." in p else p for p in prefix) + "]")
        lines.extend(f"{k} = {scalar(v)}" for k, v in scalars.items())
        for k, v in body.items():
            if isinstance(v, dict):
                table([*prefix, k], v)

    table([], config)
    return "\n".join(lines) + "\n"


def iptables_rules() -> dict[str, dict[str, tuple[list[str], list[str]]]]:
    """Every table's chains and rules, IPv4 and IPv6, to compare before and after a cluster."""
    return {cmd: parse_rules(_save(cmd)) for cmd in ("iptables-save", "ip6tables-save")}


def leftovers(state_dir: Path, rules_before: dict[str, dict[str, tuple[list[str], list[str]]]]) -> list[str]:
    """What a real node left on this machine after `down`: processes, mounts, the bridge, cgroups, iptables."""
    found = []
    marker = str(state_dir).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if marker in proc.joinpath("cmdline").read_bytes():
                    found.append(f"process {proc.name}: {proc.joinpath('cmdline').read_bytes()[:120]!r}")
    found += [f"mount {p}" for p in _mount_points() if p.startswith(str(state_dir))]
    if _run("ip", "link", "show", BRIDGE).returncode == 0:
        found.append(f"interface {BRIDGE}")
    node = RealNode(state_dir)
    found += [f"cgroup {d}" for d in node._cgroup_dirs()]
    now = iptables_rules()
    for cmd, tables in now.items():
        for table, (chains, rules) in tables.items():
            old_chains, old_rules = rules_before.get(cmd, {}).get(table, ([], []))
            found += [f"{cmd} {table} chain {c}" for c in chains if c not in old_chains]
            found += [f"{cmd} {table} rule {r}" for r in rules if r not in old_rules]
    return found
