"""NVIDIA GPUs by the product name GPU feature discovery publishes: memory and compute capability.

GPU feature discovery labels a node `nvidia.com/gpu.product` with the driver's device name, spaces replaced by
dashes (`NVIDIA-A100-SXM4-80GB`, `Tesla-T4`), and adds `-SHARED` under time-slicing and `-MIG-...` for MIG
devices. The memory is the board's total as the driver reports it (`nvidia.com/gpu.memory`, MiB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class ComputeCapability:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> ComputeCapability:
        """'8.6' -> ComputeCapability(8, 6); ValueError when not MAJOR.MINOR."""
        match = re.fullmatch(r"\s*(\d{1,2})\.(\d{1,2})\s*", text)
        if match is None:
            raise ValueError(f"{text!r} is not a compute capability such as 8.0 or 7.5")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


# bfloat16 needs Ampere (8.0); FP8 weights and KV cache need Ada or Hopper (8.9).
BF16_MIN = ComputeCapability(8, 0)
FP8_MIN = ComputeCapability(8, 9)


@dataclass(frozen=True)
class GpuModel:
    product: str  # as GPU feature discovery publishes it
    memory_mib: int  # total as the driver reports it (nvidia.com/gpu.memory)
    compute_capability: ComputeCapability

    @property
    def memory_gib(self) -> float:
        return round(self.memory_mib / 1024, 2)


def _g(product: str, memory_mib: int, major: int, minor: int) -> GpuModel:
    return GpuModel(product, memory_mib, ComputeCapability(major, minor))


GPUS: tuple[GpuModel, ...] = (
    # Pascal, Volta, Turing
    _g("Tesla-P100-PCIE-16GB", 16280, 6, 0),
    _g("Tesla-P100-SXM2-16GB", 16280, 6, 0),
    _g("Tesla-P4", 7680, 6, 1),
    _g("Tesla-P40", 23040, 6, 1),
    _g("Tesla-V100-SXM2-16GB", 16384, 7, 0),
    _g("Tesla-V100-SXM2-32GB", 32768, 7, 0),
    _g("Tesla-V100-PCIE-16GB", 16384, 7, 0),
    _g("Tesla-V100-PCIE-32GB", 32768, 7, 0),
    _g("Tesla-V100S-PCIE-32GB", 32768, 7, 0),
    _g("Tesla-T4", 15360, 7, 5),
    _g("NVIDIA-GeForce-RTX-2080-Ti", 11264, 7, 5),
    _g("NVIDIA-GeForce-RTX-2080", 8192, 7, 5),
    _g("Quadro-RTX-8000", 49152, 7, 5),
    _g("Quadro-RTX-6000", 24576, 7, 5),
    # Ampere
    _g("NVIDIA-A100-SXM4-40GB", 40960, 8, 0),
    _g("NVIDIA-A100-SXM4-80GB", 81920, 8, 0),
    _g("NVIDIA-A100-PCIE-40GB", 40960, 8, 0),
    _g("NVIDIA-A100-80GB-PCIe", 81920, 8, 0),
    _g("NVIDIA-A30", 24576, 8, 0),
    _g("NVIDIA-A10", 23028, 8, 6),
    _g("NVIDIA-A10G", 23028, 8, 6),
    _g("NVIDIA-A16", 15356, 8, 6),
    _g("NVIDIA-A2", 15356, 8, 6),
    _g("NVIDIA-A40", 46068, 8, 6),
    _g("NVIDIA-RTX-A4000", 16376, 8, 6),
    _g("NVIDIA-RTX-A5000", 24564, 8, 6),
    _g("NVIDIA-RTX-A6000", 49140, 8, 6),
    _g("NVIDIA-GeForce-RTX-3080", 10240, 8, 6),
    _g("NVIDIA-GeForce-RTX-3090", 24576, 8, 6),
    _g("NVIDIA-GeForce-RTX-3090-Ti", 24564, 8, 6),
    # Ada Lovelace
    _g("NVIDIA-L4", 23034, 8, 9),
    _g("NVIDIA-L40", 46068, 8, 9),
    _g("NVIDIA-L40S", 46068, 8, 9),
    _g("NVIDIA-RTX-4000-Ada-Generation", 20475, 8, 9),
    _g("NVIDIA-RTX-6000-Ada-Generation", 49140, 8, 9),
    _g("NVIDIA-GeForce-RTX-4080", 16376, 8, 9),
    _g("NVIDIA-GeForce-RTX-4090", 24564, 8, 9),
    # Hopper
    _g("NVIDIA-H100-PCIe", 81559, 9, 0),
    _g("NVIDIA-H100-80GB-HBM3", 81559, 9, 0),
    _g("NVIDIA-H100-NVL", 95830, 9, 0),
    _g("NVIDIA-H800", 81559, 9, 0),
    _g("NVIDIA-H200", 143771, 9, 0),
    _g("NVIDIA-H200-NVL", 143771, 9, 0),
    _g("NVIDIA-GH200-480GB", 97871, 9, 0),
    # Blackwell
    _g("NVIDIA-B200", 183359, 10, 0),
    _g("NVIDIA-GeForce-RTX-5090", 32607, 12, 0),
    _g("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", 97887, 12, 0),
)

_BY_KEY = {g.product.lower(): g for g in GPUS}
_SUFFIXES = re.compile(r"(-SHARED|-MIG-.*)$", re.IGNORECASE)


def _key(product: str) -> str:
    return _SUFFIXES.sub("", product.strip().replace(" ", "-")).lower()


def gpu_model(product: str) -> GpuModel | None:
    """The catalog entry for a product name; accepts spaces for dashes, any case, GFD's -SHARED suffix and short
    names (`A100-80GB`, `RTX 4090`, `L4`). A short name that several products share gives the weakest of them
    (least memory, then lowest compute capability), so a plan made with it holds on all of them.

    MIG slices (`-MIG-1g.10gb`) are not whole GPUs: their memory comes from the node label, never the catalog."""
    if re.search(r"-MIG-", product, re.IGNORECASE):
        return None
    key = _key(product)
    for candidate in (key, "nvidia-" + key, "tesla-" + key, "nvidia-geforce-" + key.removeprefix("geforce-")):
        if candidate in _BY_KEY:
            return _BY_KEY[candidate]
    wanted = set(key.split("-")) - {"nvidia", "tesla", "geforce"}
    matches = [g for name, g in _BY_KEY.items() if wanted and wanted <= set(name.split("-"))]
    if not matches:
        return None
    return min(matches, key=lambda g: (g.memory_mib, g.compute_capability))
