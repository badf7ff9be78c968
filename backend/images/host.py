"""The GPU facts compatibility needs: driver version, driver CUDA, compute capabilities.

Read through NVML (nvidia-ml-py) so no nvidia-smi parsing is needed; a machine without the
NVIDIA driver yields ``HostGpus()`` with no driver, and the checks say "unknown" rather than guess.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: tuple[int, int]

    @property
    def sm(self) -> int:
        """Compute capability as NVIDIA writes it in arch flags (9.0 -> 90)."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]


@dataclass(frozen=True)
class HostGpus:
    driver_version: str | None = None
    cuda_driver: str | None = None
    gpus: list[Gpu] = field(default_factory=list)
    ram_bytes: int | None = None
    cpu_count: int | None = None

    @property
    def min_sm(self) -> int | None:
        return min((g.sm for g in self.gpus), default=None)


def detect_host_gpus() -> HostGpus:
    """NVML facts for this machine; no driver / no GPU gives empty facts, never an exception."""
    import psutil

    ram = int(psutil.virtual_memory().total)
    cpus = os.cpu_count()
    try:
        import pynvml
    except ImportError:
        return HostGpus(ram_bytes=ram, cpu_count=cpus)
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return HostGpus(ram_bytes=ram, cpu_count=cpus)
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else str(driver)
        cuda_int = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        cuda = f"{cuda_int // 1000}.{(cuda_int % 1000) // 10}"
        gpus: list[Gpu] = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(Gpu(name=name, compute_capability=(int(major), int(minor))))
        return HostGpus(driver, cuda, gpus, ram, cpus)
    except pynvml.NVMLError:
        return HostGpus(ram_bytes=ram, cpu_count=cpus)
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
