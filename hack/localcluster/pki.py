"""Certificates and keys for the local control plane, made with the openssl command."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

SERVICE_CLUSTER_IP = "10.96.0.1"


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path
    kubelet_client_cert: Path
    kubelet_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _openssl("genrsa", "-out", "ca.key", "2048", cwd=d)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=localcluster-ca",
        "-days", "3650", "-out", "ca.crt", cwd=d,
    )  # fmt: skip
    sans = ",".join(
        [
            "IP:127.0.0.1",
            f"IP:{SERVICE_CLUSTER_IP}",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
    )
    (d / "serving.ext").write_text(
        f"subjectAltName={sans}\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("genrsa", "-out", "apiserver.key", "2048", cwd=d)
    _openssl("req", "-new", "-key", "apiserver.key", "-subj", "/CN=kube-apiserver", "-out", "apiserver.csr", cwd=d)
    _openssl(
        "x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3650", "-extfile", "serving.ext", "-out", "apiserver.crt", cwd=d,
    )  # fmt: skip
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=d)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=d)
    # The API server's client certificate towards kubelets (logs, exec), which trust this CA.
    _signed(d, "kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", "extendedKeyUsage=clientAuth\n")
    return Pki(
        ca_cert=d / "ca.crt",
        ca_key=d / "ca.key",
        serving_cert=d / "apiserver.crt",
        serving_key=d / "apiserver.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
        kubelet_client_cert=d / "kubelet-client.crt",
        kubelet_client_key=d / "kubelet-client.key",
    )


def _signed(d: Path, stem: str, subject: str, extensions: str) -> None:
    (d / f"{stem}.ext").write_text(extensions)
    _openssl("genrsa", "-out", f"{stem}.key", "2048", cwd=d)
    _openssl("req", "-new", "-key", f"{stem}.key", "-subj", subject, "-out", f"{stem}.csr", cwd=d)
    _openssl(
        "x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-days", "3650", "-extfile", f"{stem}.ext", "-out", f"{stem}.crt", cwd=d,
    )  # fmt: skip


def make_kubelet_serving_cert(directory: Path, node: str, ip: str) -> tuple[Path, Path]:
    """A serving certificate for a real node's kubelet, signed by the cluster CA the API server checks it with."""
    stem = f"kubelet-{node}"
    ext = f"subjectAltName=IP:{ip},DNS:{node}\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    _signed(directory, stem, f"/CN=system:node:{node}", ext)
    return directory / f"{stem}.crt", directory / f"{stem}.key"
