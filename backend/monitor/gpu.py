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

from backend.entry import gpusampler
from backend.errors import BadInput
from backend.i18n import N_, _
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
    node: str = ""  # a multi-node run's node ("node1"); empty for this machine

    @property
    def mem_fraction(self) -> float:
        return self.mem_used / self.mem_total if self.mem_total else 0.0

    @property
    def run_mem_bytes(self) -> int:
        """Memory held by this run's processes on this GPU (what the user's job costs)."""
        return sum(p.used_bytes or 0 for p in self.processes if p.owner == "this run")


@dataclass(frozen=True)
class NodeStatus:
    """One node's sampler as the panel shows it (backend/entry/gpusampler.py ``describe``)."""

    node: str  # node0, node1, ...
    host: str
    state: str  # waiting | ok | no_gpu | error | stopped | gone
    message: str = ""
    gpus: int = 0
    source: str = ""
    age_s: float | None = None  # seconds since its last line


@dataclass(frozen=True)
class GpuSnapshot:
    time: float
    state: GpuState
    gpus: tuple[GpuSample, ...] = ()
    message: str = ""
    driver: str | None = None
    source: str = "nvml"
    nodes: tuple[NodeStatus, ...] = ()  # a multi-node run: every node's sampler, node 0 first

    @property
    def final(self) -> bool:
        """True when sampling again cannot change the answer (no driver on this machine)."""
        return self.state == "no_driver"


class GpuSource(Protocol):
    def read(self) -> GpuSnapshot: ...

    def close(self) -> None: ...


NO_DRIVER_MESSAGE = N_(
    "no NVIDIA driver on this machine (NVML not available): GPU stats unavailable"
)


class NvmlSource:
    """Live NVML reads through the per-node sampler's reader (backend/entry/gpusampler.py: one
    NVML code path for this machine and every node). Without a driver: a final snapshot."""

    def __init__(self, owner: OwnerResolver | None = None) -> None:
        self.owner: OwnerResolver = owner or UnknownOwner()
        self._reader: gpusampler.NvmlReader | None = None
        self._init_error: str | None = None
        try:
            self._reader = gpusampler.NvmlReader()
        except gpusampler.ReadError as exc:
            # No pynvml, LibraryNotFound / DriverNotLoaded / NoPermission: no usable driver.
            self._init_error = f"{_(NO_DRIVER_MESSAGE)} — {exc}"

    def read(self) -> GpuSnapshot:
        if self._reader is None:
            return GpuSnapshot(
                time.time(), "no_driver", message=self._init_error or _(NO_DRIVER_MESSAGE)
            )
        header = self._reader.header
        try:
            row = self._reader.row()
        except gpusampler.ReadError as exc:
            return GpuSnapshot(time.time(), "error", message=str(exc), driver=header["driver"])
        self.owner.refresh()
        return snapshot_from_row(header, row, self.owner, "nvml")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def gpu_samples(
    header: dict[str, Any], row: dict[str, Any], owner: OwnerResolver, node: str = ""
) -> tuple[GpuSample, ...]:
    """One sample line of the trace/sampler format as GpuSamples. A process whose line carries
    ``owner`` (a node's sampler decided it there) keeps it; otherwise ``owner`` decides."""
    meta = {g["index"]: g for g in header.get("gpus", [])}
    gpus = []
    for g in row.get("gpus", []):
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
                        p["owner"] if p.get("owner") in _OWNERS else owner.owner(int(p["pid"])),
                        "" if node else owner.name(int(p["pid"])),
                    )
                    for p in g.get("procs", [])
                ),
                node=node,
            )
        )
    return tuple(gpus)


_OWNERS = ("this run", "other", "unknown")


def snapshot_from_row(
    header: dict[str, Any], row: dict[str, Any], owner: OwnerResolver, source: str
) -> GpuSnapshot:
    return GpuSnapshot(
        float(row["t"]),
        "ok",
        gpu_samples(header, row, owner),
        driver=header.get("driver"),
        source=source,
    )


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
        return snapshot_from_row(self._header, row, self.owner, f"replay:{self.path.name}")

    def close(self) -> None:
        return None
