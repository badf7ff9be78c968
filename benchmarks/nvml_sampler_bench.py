"""CPU cost of the NVML sampler at 1 Hz (the GPU panel's background work).

    python benchmarks/nvml_sampler_bench.py --seconds 60 --interval 1 [--pid PID] [--out DIR]

Measures this process's CPU time while only the sampler runs, and each NVML read's duration.
On a machine without the NVIDIA driver it records the (final) no-driver answer and its cost.
Writes ``nvml_sampler_bench.json`` into --out (or $OUT).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.monitor import GpuSnapshot, NvmlSampler, NvmlSource, ProcessTreeOwner
from backend.monitor.owner import OwnerResolver, UnknownOwner


class _TimedSource:
    """Wraps the NVML source to time each read (the sampler's whole per-tick work)."""

    def __init__(self, inner: NvmlSource) -> None:
        self.inner = inner
        self.read_ms: list[float] = []

    def read(self) -> GpuSnapshot:
        t = time.perf_counter()
        snap = self.inner.read()
        self.read_ms.append((time.perf_counter() - t) * 1000)
        return snap

    def close(self) -> None:
        self.inner.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--pid", type=int, help="mark this pid's process tree as 'this run'")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    owner: OwnerResolver = ProcessTreeOwner(args.pid) if args.pid else UnknownOwner()
    t_init = time.perf_counter()
    source = _TimedSource(NvmlSource(owner))
    init_ms = (time.perf_counter() - t_init) * 1000
    snaps: list[GpuSnapshot] = []
    sampler = NvmlSampler(source, snaps.append, interval=args.interval)
    cpu0 = os.times()
    t0 = time.monotonic()
    sampler.start()
    while time.monotonic() - t0 < args.seconds and not (snaps and snaps[-1].final):
        time.sleep(0.2)
    sampler.stop()
    wall = time.monotonic() - t0
    cpu1 = os.times()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    last = snaps[-1] if snaps else None
    result: dict[str, Any] = {
        "state": last.state if last else None,
        "message": last.message if last else None,
        "driver": last.driver if last else None,
        "gpus": len(last.gpus) if last else 0,
        "interval_s": args.interval,
        "wall_s": round(wall, 2),
        "samples": sampler.samples,
        "overlaps": sampler.overlaps,
        "nvml_init_ms": round(init_ms, 2),
        "read_ms_median": round(statistics.median(source.read_ms), 3) if source.read_ms else None,
        "read_ms_max": round(max(source.read_ms), 3) if source.read_ms else None,
        "cpu_s": round(cpu_s, 3),
        "cpu_percent_of_one_core": round(100 * cpu_s / wall, 3) if wall else None,
        "cpu_ms_per_sample": round(1000 * cpu_s / max(1, sampler.samples), 3),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "nvml_sampler_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
