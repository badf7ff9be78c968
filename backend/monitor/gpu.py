"""Per-GPU samples from NVML (live) or from a recorded trace (replay), through one code path.

The GPU panel never talks to NVML directly: a ``GpuSource`` returns a ``GpuSnapshot`` and the
``NvmlSampler`` (sampler.py) calls it on a fixed cadence. Tests feed the recorded H200 traces
through ``TraceReplaySource`` so they exercise the same snapshot/ownership code as a live run.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from backend.errors import BadInput
from backend.i18n import _
from backend.monitor.owner import OwnerResolver, UnknownOwner

GpuState = Literal["ok", "no_driver", "error"]


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None
    owner: Literal["this run", "other", "unknown"]
    name: str = ""


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    mem_used: int
    mem_total: int
    util: int | None
    temp_c: int | None
    power_w: float | None
    power_limit_w: float | None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def mem_fraction(self) -> float:
        return self.mem_used / self.mem_total if self.mem_total else 0.0

    @property
    def run_mem_bytes(self) -> int:
        """Memory held by this run's processes on this GPU (what the user's job costs)."""
        return sum(p.used_bytes or 0 for p in self.processes if p.owner == "this run")


@dataclass(frozen=True)
class GpuSnapshot:
    time: float
    state: GpuState
    gpus: tuple[GpuSample, ...] = ()
    message: str = ""
    driver: str | None = None
    source: str = "nvml"

    @property
    def final(self) -> bool:
        """True when sampling again cannot change the answer (no driver on this machine)."""
        return self.state == "no_driver"


class GpuSource(Protocol):
    def read(self) -> GpuSnapshot: ...

    def close(self) -> None: ...


NO_DRIVER_MESSAGE = "no NVIDIA driver on this machine (NVML not available): GPU stats unavailable"


class NvmlSource:
    """Live NVML reads. Initialises once; a machine without the driver yields a final snapshot."""

    def __init__(self, owner: OwnerResolver | None = None) -> None:
        self.owner: OwnerResolver = owner or UnknownOwner()
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._static: list[tuple[str, int, float | None]] = []
        self._driver: str | None = None
        self._init_error: str | None = None
        self._init()

    def _init(self) -> None:
        try:
            import pynvml
        except ImportError:
            self._init_error = NO_DRIVER_MESSAGE + " — the nvidia-ml-py package is missing"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            # LibraryNotFound / DriverNotLoaded / NoPermission: all mean "no usable driver here".
            self._init_error = f"{NO_DRIVER_MESSAGE} — NVML said: {exc}"
            return
        self._nvml = pynvml
        self._driver = _text(_try(pynvml.nvmlSystemGetDriverVersion))
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(_try(pynvml.nvmlDeviceGetName, handle)) or f"GPU {i}"
            limit = _try(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            self._handles.append(handle)
            total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            self._static.append((name, total, limit / 1000.0 if limit is not None else None))

    def read(self) -> GpuSnapshot:
        now = time.time()
        if self._nvml is None:
            return GpuSnapshot(now, "no_driver", message=self._init_error or NO_DRIVER_MESSAGE)
        nv = self._nvml
        self.owner.refresh()
        gpus = []
        try:
            for i, handle in enumerate(self._handles):
                name, total, limit_w = self._static[i]
                mem = nv.nvmlDeviceGetMemoryInfo(handle)
                util = _try(nv.nvmlDeviceGetUtilizationRates, handle)
                temp = _try(nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
                power = _try(nv.nvmlDeviceGetPowerUsage, handle)
                procs = list(_try(nv.nvmlDeviceGetComputeRunningProcesses, handle) or [])
                gpus.append(
                    GpuSample(
                        index=i,
                        name=name,
                        mem_used=int(mem.used),
                        mem_total=total,
                        util=int(util.gpu) if util is not None else None,
                        temp_c=int(temp) if temp is not None else None,
                        power_w=power / 1000.0 if power is not None else None,
                        power_limit_w=limit_w,
                        processes=self._processes(
                            (int(p.pid), _used(p.usedGpuMemory)) for p in procs
                        ),
                    )
                )
        except nv.NVMLError as exc:
            return GpuSnapshot(
                now, "error", message=f"NVML read failed: {exc}", driver=self._driver
            )
        return GpuSnapshot(now, "ok", tuple(gpus), driver=self._driver)

    def _processes(self, procs: Iterator[tuple[int, int | None]]) -> tuple[GpuProcess, ...]:
        return tuple(
            GpuProcess(pid, used, self.owner.owner(pid), self.owner.name(pid))
            for pid, used in procs
        )

    def close(self) -> None:
        if self._nvml is not None:
            _try(self._nvml.nvmlShutdown)
            self._nvml = None


@dataclass
class TraceReplaySource:
    """Replays an NVML trace recorded as JSONL (tests/fixtures/h200/nvml-trace-*.jsonl format).

    Line 1 describes the machine; each later line is one sample. ``read()`` returns the next
    sample and then keeps returning the last one (``exhausted`` tells), or loops when ``loop``.
    """

    path: Path
    owner: OwnerResolver = field(default_factory=lambda: UnknownOwner())
    loop: bool = False
    exhausted: bool = field(default=False, init=False)
    _header: dict[str, Any] = field(default_factory=dict, init=False, repr=False)
    _rows: list[dict[str, Any]] = field(default_factory=list, init=False, repr=False)
    _pos: int = field(default=0, init=False, repr=False)
    _last: GpuSnapshot | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise BadInput(
                _("trace: cannot read {path}: {strerror}").format(
                    path=self.path, strerror=exc.strerror
                )
            ) from exc
        try:
            self._header = json.loads(lines[0])
            self._rows = [json.loads(line) for line in lines[1:] if line.strip()]
        except (IndexError, json.JSONDecodeError) as exc:
            raise BadInput(
                _("trace: {path} is not an NVML trace JSONL: {exc}").format(path=self.path, exc=exc)
            ) from exc
        if "gpus" not in self._header or not self._rows:
            raise BadInput(
                _("trace: {path} has no machine header or no samples").format(path=self.path)
            )

    def __len__(self) -> int:
        return len(self._rows)

    def read(self) -> GpuSnapshot:
        if self._pos >= len(self._rows):
            if not self.loop and self._last is not None:
                self.exhausted = True
                return self._last
            self._pos = 0
        row = self._rows[self._pos]
        self._pos += 1
        self._last = self.snapshot(row)
        return self._last

    def snapshots(self) -> Iterator[GpuSnapshot]:
        """Every sample in order (for tests and CLI dumps), independent of ``read()``."""
        for row in self._rows:
            yield self.snapshot(row)

    def snapshot(self, row: dict[str, Any]) -> GpuSnapshot:
        self.owner.refresh()
        meta = {g["index"]: g for g in self._header["gpus"]}
        gpus = []
        for g in row["gpus"]:
            m = meta.get(g["i"], {})
            limit_mw = m.get("power_limit_mw")
            gpus.append(
                GpuSample(
                    index=int(g["i"]),
                    name=str(m.get("name", f"GPU {g['i']}")),
                    mem_used=int(g["used"]),
                    mem_total=int(g.get("total") or m.get("mem_total") or 0),
                    util=g.get("util"),
                    temp_c=g.get("temp"),
                    power_w=g["power_mw"] / 1000.0 if g.get("power_mw") is not None else None,
                    power_limit_w=limit_mw / 1000.0 if limit_mw is not None else None,
                    processes=tuple(
                        GpuProcess(
                            int(p["pid"]),
                            p.get("used"),
                            self.owner.owner(int(p["pid"])),
                            self.owner.name(int(p["pid"])),
                        )
                        for p in g.get("procs", [])
                    ),
                )
            )
        return GpuSnapshot(
            float(row["t"]),
            "ok",
            tuple(gpus),
            driver=self._header.get("driver"),
            source=f"replay:{self.path.name}",
        )

    def close(self) -> None:
        return None


def _try(fn: Any, *args: Any) -> Any:
    """NVML raises NotSupported for fields some boards lack; show those as unknown, not fail."""
    try:
        import pynvml
    except ImportError:  # pragma: no cover - only reached with pynvml present
        return None
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _used(value: Any) -> int | None:
    # NVML reports "not available" (e.g. under some containers / MIG) as a huge sentinel or None.
    if value is None or int(value) >= 2**63 - 1:
        return None
    return int(value)
