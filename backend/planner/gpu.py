"""The GPU the plan is for: memory, dense bf16 peak and compute capability.

The planner takes a ``GpuSpec`` rather than probing hardware so that a plan can be made for the
server from anywhere (the wizard passes what the Check step found over SSH). Peaks are the
vendors' dense bf16 figures, the same ones the training entry uses for MFU.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend import nvml
from backend.errors import BadInput
from backend.i18n import _
from backend.units import GIB


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_bytes: int
    peak_flops: float  # dense bf16 (fp16 for pre-Ampere), per GPU
    hbm_bytes_per_s: float
    cc: tuple[int, int]
    count: int = 1  # GPUs visible on the node

    @property
    def memory_gib(self) -> float:
        return self.memory_bytes / GIB

    @property
    def bf16_ok(self) -> bool:
        """bf16, tf32 and flash-attn 2 need compute capability 8.0 (Ampere) or newer."""
        return self.cc >= (8, 0)

    def with_count(self, count: int) -> GpuSpec:
        return GpuSpec(
            self.name, self.memory_bytes, self.peak_flops, self.hbm_bytes_per_s, self.cc, count
        )


# (match keys, memory bytes as NVML reports, peak bf16 FLOP/s, HBM bytes/s, compute capability).
# Order matters: more specific names first ("H100 PCIe" before "H100").
_KNOWN: tuple[tuple[tuple[str, ...], int, float, float, tuple[int, int]], ...] = (
    (("H200",), 150_754_820_096, 989e12, 4.8e12, (9, 0)),
    (("H100", "PCIE"), 85_520_809_984, 756e12, 2.0e12, (9, 0)),
    (("H100", "NVL"), 100_485_038_080, 835e12, 3.9e12, (9, 0)),
    (("H100",), 85_520_809_984, 989e12, 3.35e12, (9, 0)),
    (("H800",), 85_520_809_984, 989e12, 3.35e12, (9, 0)),
    (("A100", "40GB"), 42_505_273_344, 312e12, 1.56e12, (8, 0)),
    (("A100",), 85_899_345_920, 312e12, 2.0e12, (8, 0)),
    (("A800",), 85_899_345_920, 312e12, 2.0e12, (8, 0)),
    (("L40S",), 48_305_799_168, 362e12, 0.864e12, (8, 9)),
    (("A6000",), 51_527_024_640, 155e12, 0.768e12, (8, 6)),
    (("A10",), 24_146_608_128, 125e12, 0.6e12, (8, 6)),
    (("4090",), 25_757_220_864, 165e12, 1.0e12, (8, 9)),
    (("3090",), 25_769_803_776, 71e12, 0.936e12, (8, 6)),
    (("V100",), 34_359_738_368, 125e12, 0.9e12, (7, 0)),
    (("T4",), 16_106_127_360, 65e12, 0.32e12, (7, 5)),
)

# Short names accepted on the command line.
ALIASES = {
    "h200": "NVIDIA H200",
    "h100": "NVIDIA H100 80GB HBM3",
    "h100-pcie": "NVIDIA H100 PCIe",
    "a100": "NVIDIA A100-SXM4-80GB",
    "a100-80g": "NVIDIA A100-SXM4-80GB",
    "a100-40g": "NVIDIA A100-SXM4-40GB",
    "l40s": "NVIDIA L40S",
    "a10": "NVIDIA A10",
    "4090": "NVIDIA GeForce RTX 4090",
    "v100": "Tesla V100-SXM2-32GB",
}


def gpu_spec(name: str, memory_bytes: int | None = None, count: int = 1) -> GpuSpec:
    """Spec for a GPU name as nvidia-smi/NVML prints it (or an alias like ``h200``).

    ``memory_bytes`` (what NVML reports on the real machine) wins over the table.
    """
    full = ALIASES.get(name.strip().lower(), name)
    upper = full.upper().replace("-", " ")
    for keys, mem, peak, bw, cc in _KNOWN:
        if all(key in upper for key in keys):
            if keys == ("A100",) and "40GB" in upper.replace(" ", ""):
                continue
            return GpuSpec(full, memory_bytes or mem, peak, bw, cc, count)
    if memory_bytes:
        # Unknown model: plan memory exactly, guess throughput from an A100-class peak.
        return GpuSpec(full, memory_bytes, 312e12, 1.5e12, (8, 0), count)
    known = ", ".join(sorted(ALIASES))
    raise BadInput(
        _("GPU '{name}': unknown model; use one of {known} or give its memory").format(
            name=name, known=known
        )
    )


def spec_from_snapshot(snap: dict[str, object]) -> GpuSpec | None:
    """The first GPU of an NVML snapshot (``backend.nvml.snapshot``), with its count."""
    gpus = snap.get("gpus")
    if not isinstance(gpus, list) or not gpus:
        return None
    first = gpus[0]
    spec = gpu_spec(str(first["name"]), int(first["memory_total"]), count=len(gpus))
    major, _, minor = str(first.get("compute_capability", "")).partition(".")
    if major.isdigit() and minor.isdigit():
        cc = (int(major), int(minor))
        spec = GpuSpec(
            spec.name, spec.memory_bytes, spec.peak_flops, spec.hbm_bytes_per_s, cc, spec.count
        )
    return spec


def detect_local() -> GpuSpec | None:
    """This machine's GPUs through NVML, or None when there are none (or no driver)."""
    try:
        return spec_from_snapshot(nvml.snapshot())
    except Exception:  # NVML missing or broken: no local GPU to plan for
        return None
