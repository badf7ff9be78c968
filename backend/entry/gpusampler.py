"""The GPU sampler: NVML (or ``nvidia-smi``) readings as JSONL lines, on every node of a run.

Self-contained like the training entry (stdlib only; ``pynvml`` from nvidia-ml-py when it
imports): the launcher copies it into ``<run>/entry/`` and every node runs it with the run's
python, writing ``<run>/nodes/node<i>/gpu.jsonl`` over the run's shared file system. The wizard
imports the same readers for its own machine (``backend.monitor.gpu.NvmlSource``), so there is
one NVML code path, not one per place that looks at GPUs.

The file is the NVML trace format (tests/fixtures/h200/README.md): a header line describing the
machine (plus ``kind: header``, ``node``, ``host``, ``pid``, ``source``, ``state``), then one
line per sample (``t`` and per GPU ``i``, ``used``, ``total``, ``util``, ``temp``, ``power_mw``,
``procs``), and an ``end`` line when the sampler stops on purpose. A machine without a usable
driver writes ``state: no_gpu`` with the reasons, then heartbeats (``gpus: []``), so "no GPU
here" and "the sampler died" (no line for a while, no end line) stay two different things.

Sources: ``nvml`` -> ``nvidia-smi --query-gpu`` -> ``none``; ``--replay TRACE`` replays a
recorded trace as this node's readings (the tests' and demos' source, named ``replay:<file>``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

FINAL_STATES = ("finished", "failed", "stopped")
ROTATE_BYTES = 16 << 20  # one 8-GPU node writes ~2 KB/s: keep a day's file bounded
STALE_MIN_S = 10.0  # no line for max(this, 5 intervals) while the run lives: the sampler is gone


class ReadError(Exception):
    """A reading that failed this time (a GPU fell off the bus, NVML timed out)."""


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlReader:
    """Live NVML; raises ``ReadError`` at construction when there is no usable driver."""

    source = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as exc:
            raise ReadError("the nvidia-ml-py package (pynvml) is missing") from exc
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:  # LibraryNotFound / DriverNotLoaded / NoPermission
            raise ReadError(f"NVML said: {exc}") from exc
        self.nv = pynvml
        self.handles = [
            pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
        ]
        gpus = []
        for i, handle in enumerate(self.handles):
            limit = self._try(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle)
            gpus.append(
                {
                    "index": i,
                    "name": _text(self._try(pynvml.nvmlDeviceGetName, handle)) or f"GPU {i}",
                    "mem_total": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    "power_limit_mw": int(limit) if limit is not None else None,
                }
            )
        driver = _text(self._try(pynvml.nvmlSystemGetDriverVersion))
        self.header: dict[str, Any] = {"driver": driver, "gpus": gpus}

    def _try(self, fn: Any, *args: Any) -> Any:
        """Fields some boards lack raise NotSupported: unknown, not a failed reading."""
        try:
            return fn(*args)
        except self.nv.NVMLError:
            return None

    def row(self) -> dict[str, Any]:
        nv, gpus = self.nv, []
        try:
            for i, handle in enumerate(self.handles):
                mem = nv.nvmlDeviceGetMemoryInfo(handle)
                util = self._try(nv.nvmlDeviceGetUtilizationRates, handle)
                procs = self._try(nv.nvmlDeviceGetComputeRunningProcesses, handle) or []
                gpus.append(
                    {
                        "i": i,
                        "used": int(mem.used),
                        "total": int(mem.total),
                        "util": int(util.gpu) if util is not None else None,
                        "temp": self._try(nv.nvmlDeviceGetTemperature, handle, 0),
                        "power_mw": self._try(nv.nvmlDeviceGetPowerUsage, handle),
                        "procs": [
                            {"pid": int(p.pid), "used": _used(p.usedGpuMemory)} for p in procs
                        ],
                    }
                )
        except nv.NVMLError as exc:
            raise ReadError(f"NVML read failed: {exc}") from exc
        return {"t": time.time(), "gpus": gpus}

    def close(self) -> None:
        self._try(self.nv.nvmlShutdown)


def _used(value: Any) -> int | None:
    # "not available" (some containers, MIG) comes as a huge sentinel or None.
    if value is None or int(value) >= 2**63 - 1:
        return None
    return int(value)


_SMI_GPU = "index,name,memory.used,memory.total,utilization.gpu,temperature.gpu,power.draw,power.limit,pci.bus_id,driver_version"
_SMI_APPS = "gpu_bus_id,pid,used_memory"
_MIB = 1024 * 1024


class SmiReader:
    """``nvidia-smi --query-gpu`` when the python has no pynvml (a bare training venv)."""

    source = "nvidia-smi"

    def __init__(self, smi: str | None = None) -> None:
        self.smi = smi or shutil.which("nvidia-smi")
        if not self.smi:
            raise ReadError("nvidia-smi is not on PATH")
        rows = self._gpus()
        self.header: dict[str, Any] = {
            "driver": rows[0][9] if rows else None,
            "gpus": [
                {
                    "index": int(r[0]),
                    "name": r[1],
                    "mem_total": _num(r[3], _MIB),
                    "power_limit_mw": _num(r[7], 1000),
                }
                for r in rows
            ],
        }

    def _query(self, what: str, fields: str) -> list[list[str]]:
        argv = [str(self.smi), f"--query-{what}={fields}", "--format=csv,noheader,nounits"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ReadError(f"nvidia-smi failed: {exc}") from exc
        if proc.returncode != 0:
            said = (proc.stdout + proc.stderr).strip().splitlines()
            raise ReadError(f"nvidia-smi said: {said[0] if said else proc.returncode}")
        return [[c.strip() for c in line.split(",")] for line in proc.stdout.splitlines() if line]

    def _gpus(self) -> list[list[str]]:
        return [r for r in self._query("gpu", _SMI_GPU) if len(r) >= 10]

    def row(self) -> dict[str, Any]:
        rows = self._gpus()
        procs: dict[str, list[dict[str, Any]]] = {}
        for bus, pid, used in (
            r[:3] for r in self._query("compute-apps", _SMI_APPS) if len(r) >= 3
        ):
            if pid.isdigit():
                procs.setdefault(bus, []).append({"pid": int(pid), "used": _num(used, _MIB)})
        return {
            "t": time.time(),
            "gpus": [
                {
                    "i": int(r[0]),
                    "used": _num(r[2], _MIB) or 0,
                    "total": _num(r[3], _MIB) or 0,
                    "util": _num(r[4], 1),
                    "temp": _num(r[5], 1),
                    "power_mw": _num(r[6], 1000),
                    "procs": procs.get(r[8], []),
                }
                for r in rows
            ],
        }

    def close(self) -> None:
        return None


def _num(text: str, scale: int) -> int | None:
    """nvidia-smi's number in its unit times ``scale``; ``[N/A]``/``[Not Supported]`` -> None."""
    try:
        return round(float(text) * scale)
    except ValueError:
        return None


class ReplayReader:
    """A recorded NVML trace replayed as this node's readings, ``t`` rewritten to now.

    Starts at sample ``start`` and loops, so a replayed node looks like a live one."""

    def __init__(self, trace: Path | str, start: int = 0) -> None:
        self.path = Path(trace)
        lines = [x for x in self.path.read_text(encoding="utf-8").splitlines() if x.strip()]
        try:
            head = json.loads(lines[0])
            self.rows = [json.loads(x) for x in lines[1:]]
        except (IndexError, ValueError) as exc:
            raise ReadError(f"{self.path} is not an NVML trace: {exc}") from exc
        if "gpus" not in head or not self.rows:
            raise ReadError(f"{self.path} has no machine header or no samples")
        self.header = {"driver": head.get("driver"), "gpus": head["gpus"]}
        self.source = f"replay:{self.path.name}"
        self.pos = max(0, start) % len(self.rows)

    def row(self) -> dict[str, Any]:
        row = dict(self.rows[self.pos])
        self.pos = (self.pos + 1) % len(self.rows)
        row["t"] = time.time()
        return row

    def close(self) -> None:
        return None


def open_reader(replay: str | None = None, replay_start: int = 0) -> Any:
    """The first reader that works here; ``None`` and the reasons when none does."""
    if replay:
        return ReplayReader(replay, replay_start), []
    reasons: list[str] = []
    for factory in (NvmlReader, SmiReader):
        try:
            return factory(), reasons  # why the better readers were not used
        except ReadError as exc:
            reasons.append(f"{factory.source}: {exc}")
    return None, reasons


def proc_owner(pid: int, marker: bytes | None) -> str:
    """'this run' when the process's environment carries the run's marker (its metrics path,
    inherited by every rank), 'other' when readable without it, 'unknown' when not readable."""
    if not marker:
        return "unknown"
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return "unknown"
    return "this run" if b"\0" + marker + b"\0" in b"\0" + env + b"\0" else "other"


def ticks(
    interval: float, stopped: Callable[[], bool], wait: Callable[[float], object] = time.sleep
) -> Iterator[int]:
    """The sampling cadence (here and in the wizard's NvmlSampler): the next tick is armed only
    after the previous one's work returned, at ``max(previous tick + interval, now)``. A slow
    reading (a hung GPU can take seconds) delays the next one instead of stacking calls or
    bursting to catch up. ``wait`` may return early (an Event's wait) when stopping."""
    next_at, count = time.monotonic(), 0
    while not stopped():
        yield count
        count += 1
        next_at = max(next_at + interval, time.monotonic())
        while not stopped() and (left := next_at - time.monotonic()) > 0:
            wait(min(0.2, left))


class Sampler:
    """Writes the header, then a line every ``interval`` s, until a stop reason comes."""

    def __init__(self, out: Path, node: str, host: str, interval: float = 1.0) -> None:
        self.out, self.node, self.host, self.interval = out, node, host, interval
        self.stop_reason: str | None = None
        self.header: dict[str, Any] = {}

    def _write(self, record: dict[str, Any]) -> None:
        with open(self.out, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, separators=(",", ":")) + "\n")

    def _start_file(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        if self.out.exists() and self.out.stat().st_size:
            os.replace(self.out, self.out.with_name(self.out.name + ".1"))
        self._write(self.header)

    def run(
        self,
        reader: Any,
        reasons: list[str],
        *,
        marker: bytes | None = None,
        status: Path | None = None,
        heartbeat: bool = False,
        max_samples: int | None = None,
        stop_file: Path | None = None,
    ) -> str:
        self.header = {
            "kind": "header",
            "node": self.node,
            "host": self.host,
            "pid": os.getpid(),
            "started": time.time(),
            "interval": self.interval,
            "source": reader.source if reader else "none",
            "state": "ok" if reader else "no_gpu",
            "message": "; ".join(reasons),
            **(reader.header if reader else {"driver": None, "gpus": []}),
        }
        self._start_file()
        checked = 0.0
        for tick in ticks(self.interval, lambda: self.stop_reason is not None):
            record: dict[str, Any]
            try:
                record = reader.row() if reader else {"t": time.time(), "gpus": []}
                if marker is not None and not str(self.header["source"]).startswith("replay:"):
                    for gpu in record["gpus"]:
                        for proc in gpu["procs"]:
                            proc["owner"] = proc_owner(int(proc["pid"]), marker)
            except ReadError as exc:
                record = {"t": time.time(), "state": "error", "message": str(exc), "gpus": []}
            if self.out.exists() and self.out.stat().st_size > ROTATE_BYTES:
                self._start_file()
            self._write(record)
            samples = tick + 1
            if heartbeat:  # over ssh: a closed channel (the watcher is gone) ends the sampler
                try:
                    sys.stdout.write(f"{record['t']:.1f}\n")
                    sys.stdout.flush()
                except OSError:
                    self.stop_reason = "its ssh channel closed"
            if max_samples is not None and samples >= max_samples:
                self.stop_reason = self.stop_reason or f"{samples} samples taken"
            if stop_file is not None and stop_file.exists():
                self.stop_reason = "the training step ended"
            if status is not None and time.monotonic() - checked > 5:
                checked = time.monotonic()
                if run_state(status) in FINAL_STATES:
                    self.stop_reason = f"the run is {run_state(status)}"
        if reader:
            reader.close()
        self._write({"kind": "end", "t": time.time(), "reason": self.stop_reason})
        return self.stop_reason or "stopped"


def run_state(status: Path) -> str | None:
    try:
        return json.loads(status.read_text(encoding="utf-8")).get("state")
    except (OSError, ValueError, AttributeError):
        return None


def describe(
    header: dict[str, Any] | None,
    last: dict[str, Any] | None,
    end: dict[str, Any] | None,
    now: float,
) -> tuple[str, str]:
    """(state, why) of one node's sampler from its file: ``waiting`` (no header yet), ``ok``,
    ``no_gpu``, ``error`` (this reading failed), ``stopped`` (an end line), or ``gone`` (no
    line for a while and no end line: the sampler died without saying so)."""
    if header is None:
        return "waiting", "the sampler has not written yet"
    if end is not None:
        return "stopped", f"sampler stopped: {end.get('reason') or 'no reason given'}"
    seen = float((last or header).get("t") or header.get("started") or 0.0)
    limit = max(STALE_MIN_S, 5 * float(header.get("interval") or 1.0))
    if now - seen > limit:
        return "gone", f"no sample for {now - seen:.0f} s: the sampler on this node stopped"
    if header.get("state") == "no_gpu":
        return "no_gpu", f"no GPU on this node ({header.get('message') or 'no reader'})"
    if last is not None and last.get("state") == "error":
        return "error", str(last.get("message") or "reading failed")
    return "ok", ""


def _node_name(args: argparse.Namespace) -> tuple[str, str]:
    """``--node auto`` inside a Slurm task: node<SLURM_NODEID>, host = the Slurm node name."""
    host = args.host or os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    if args.node != "auto":
        return args.node, host
    return f"node{os.environ.get('SLURM_NODEID', '0')}", host


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="trainwiz per-node GPU sampler")
    parser.add_argument("--node", required=True, help="node<i>, or 'auto' in a Slurm task")
    parser.add_argument("--host", default=None)
    parser.add_argument("--out-dir", required=True, help="<run>/nodes: writes <node>/gpu.jsonl")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--status", default=None, help="status.json: stop once the run ended")
    parser.add_argument("--marker", default=None, help="env entry that marks this run's ranks")
    parser.add_argument("--heartbeat", action="store_true", help="a line on stdout per sample")
    parser.add_argument("--max-samples", type=int, default=None)
    parser.add_argument("--stop-file", default=None, help="stop once this file exists (Slurm)")
    parser.add_argument("--replay", default=None, help="a recorded NVML trace (JSONL)")
    parser.add_argument("--replay-start", type=int, default=0)
    args = parser.parse_args(argv)
    if args.interval <= 0:
        parser.error("--interval must be > 0 seconds")
    node, host = _node_name(args)
    sampler = Sampler(Path(args.out_dir) / node / "gpu.jsonl", node, host, args.interval)

    def _stop(signum: int, _frame: Any) -> None:
        sampler.stop_reason = f"signal {signal.Signals(signum).name}"

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL if not args.heartbeat else signal.SIG_IGN)
    try:
        reader, reasons = open_reader(args.replay, args.replay_start)
    except (OSError, ReadError) as exc:
        print(f"gpusampler: {exc}", file=sys.stderr)
        return 2
    sampler.run(
        reader,
        reasons,
        marker=args.marker.encode() if args.marker else None,
        status=Path(args.status) if args.status else None,
        heartbeat=args.heartbeat,
        max_samples=args.max_samples,
        stop_file=Path(args.stop_file) if args.stop_file else None,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
