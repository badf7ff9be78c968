"""Samples real NVML through the monitor's own sampler while a given pid trains.

    python benchmarks/gpu_monitor_probe.py --pid TORCHRUN_PID --seconds 120 --out $OUT/probe.jsonl

Each line of the output is one ``GpuSnapshot`` as JSON (per GPU: memory, util, temperature,
power and limit, processes with owner "this run"/"other"/"unknown"), exactly what the GPU panel
would show. A summary (peak memory per GPU, processes seen as this run) is printed at the end and
written next to the JSONL as ``<name>.summary.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.monitor import GpuSnapshot, NvmlSampler, NvmlSource, ProcessTreeOwner
from backend.monitor.owner import OwnerResolver, UnknownOwner


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pid", type=int, help="the training's launcher pid (torchrun / python)")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--out", required=True, help="JSONL path to write")
    args = ap.parse_args()
    owner: OwnerResolver = ProcessTreeOwner(args.pid) if args.pid else UnknownOwner()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    peak: dict[int, int] = {}
    ours: set[tuple[int, int]] = set()
    others: set[tuple[int, int]] = set()
    count = 0
    last: GpuSnapshot | None = None
    lock = threading.Lock()
    with open(out, "w", encoding="utf-8") as fh:

        def on_sample(snap: GpuSnapshot) -> None:
            nonlocal count, last
            with lock:
                fh.write(json.dumps(dataclasses.asdict(snap)) + "\n")
                fh.flush()
                count += 1
                last = snap
                for g in snap.gpus:
                    peak[g.index] = max(peak.get(g.index, 0), g.mem_used)
                    for p in g.processes:
                        (ours if p.owner == "this run" else others).add((g.index, p.pid))

        sampler = NvmlSampler(NvmlSource(owner), on_sample, interval=args.interval)
        sampler.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.seconds:
            if last is not None and last.final:
                break
            time.sleep(0.2)
        sampler.stop()
    summary: dict[str, Any] = {
        "samples": count,
        "overlaps": sampler.overlaps,
        "state": last.state if last else None,
        "message": last.message if last else None,
        "driver": last.driver if last else None,
        "peak_mem_gib": {i: round(v / 2**30, 2) for i, v in sorted(peak.items())},
        "this_run_pids": sorted(ours),
        "other_pids": sorted(others),
        "last": [
            {
                "gpu": g.index,
                "name": g.name,
                "mem_gib": round(g.mem_used / 2**30, 2),
                "util": g.util,
                "temp_c": g.temp_c,
                "power_w": g.power_w,
                "power_limit_w": g.power_limit_w,
                "procs": [(p.pid, p.owner, p.name) for p in g.processes],
            }
            for g in (last.gpus if last else ())
        ],
    }
    Path(str(out) + ".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
