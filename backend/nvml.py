"""What NVML says about this machine's GPUs, as plain data.

A leaf: the GPU checks (``backend.checks.gpu``) and the planner's local GPU
(``backend.planner.gpu.detect_local``) both read it, and it imports neither.
"""

from __future__ import annotations

from typing import Any

from backend.i18n import _


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _process_owner(pid: int) -> str:
    import psutil

    try:
        proc = psutil.Process(pid)
        return f"{proc.name()} ({proc.username()})"
    except (psutil.Error, KeyError):
        return _("not visible here (another container or PID namespace)")


def snapshot() -> dict[str, Any]:
    """Everything NVML says, as plain data; ``error`` set when NVML cannot start."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {"error": str(exc), "error_type": type(exc).__name__}
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        snap: dict[str, Any] = {
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda": f"{cuda // 1000}.{cuda % 1000 // 10}",
            "gpus": [],
        }
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            try:
                mig = bool(pynvml.nvmlDeviceGetMigMode(handle)[0])
            except pynvml.NVMLError:
                mig = False
            try:
                procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except pynvml.NVMLError:
                procs = []
            snap["gpus"].append(
                {
                    "index": index,
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "memory_total": int(mem.total),
                    "memory_used": int(mem.used),
                    "compute_capability": f"{major}.{minor}",
                    "sm": major * 10 + minor,
                    "mig": mig,
                    "processes": [
                        {
                            "pid": int(p.pid),
                            "used": int(p.usedGpuMemory or 0),
                            "owner": _process_owner(int(p.pid)),
                        }
                        for p in procs
                    ],
                }
            )
        return snap
    finally:
        pynvml.nvmlShutdown()
