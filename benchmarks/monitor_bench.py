"""Monitor under load: 20,000 log lines/s and metrics at 10 Hz into a run dir for 60 s.

A separate writer process produces the load (so this process's CPU is the monitor's alone); the
monitor runs headless (Textual builds every frame; only the final terminal encoding is skipped).
Every 250 ms a key is posted and the time until its action runs is recorded.

    .venv/bin/python benchmarks/monitor_bench.py --seconds 60 --rate 20000 --out docs/bench

Writes ``monitor_bench.json`` into --out (or $OUT) and prints it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CORPUS = ROOT / "tests" / "fixtures" / "logcorpus"
TRACE = ROOT / "tests" / "fixtures" / "h200" / "nvml-trace-fastchat-1b-2gpu.jsonl"


def writer(run: Path, rate: int, seconds: float, metrics_hz: float) -> None:
    """Appends log lines (with tqdm redraws and real failure lines mixed in) and metrics."""
    rng = random.Random(0)
    flagged = CORPUS / "nccl" / "llamafactory-6269-watchdog-reduce-scatter-timeout.log"
    failures = [ln for ln in flagged.read_text().splitlines() if ln.strip()][:4]
    log = open(run / "train.log", "a", buffering=1 << 20)  # noqa: SIM115
    met = open(run / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
    met.write(
        json.dumps(
            {
                "kind": "start",
                "world_size": 2,
                "n_params": 1_347_000_000,
                "flops_per_token": 8.69e9,
                "peak_flops": 989e12,
                "gpu_name": "NVIDIA H200",
            }
        )
        + "\n"
    )
    t0 = time.monotonic()
    written = 0
    progress = 0
    step = 0
    max_steps = int(seconds * metrics_hz)
    next_metric = t0
    tick = 0.01
    while (now := time.monotonic()) - t0 < seconds:
        due = int((now - t0) * rate) - written
        chunk = []
        for _ in range(due):
            written += 1
            if written % 1000 == 0:
                chunk.append(failures[written // 1000 % len(failures)] + "\n")
            elif written % 50 == 0:
                progress += 1
                chunk.append(
                    f"\r{written % 100:3d}%|###       | {step}/{max_steps} [00:01<00:09, 3.1it/s]\r"
                )
            else:
                chunk.append(
                    f"[rank{written % 8}] step {step} batch {written} "
                    f"tokens={rng.randint(1000, 9000)} info line\n"
                )
        log.write("".join(chunk))
        log.flush()
        while now >= next_metric:
            step += 1
            loss = 10 * math.exp(-step / 200) + 1.5 + rng.random() * 0.05
            st = 0.1
            met.write(
                json.dumps(
                    {
                        "kind": "step",
                        "step": step,
                        "max_steps": max_steps,
                        "epoch": step / 100,
                        "loss": loss if step % 137 else loss * 4,
                        "learning_rate": 2e-5,
                        "grad_norm": 1.0 if step % 211 else 40.0,
                        "step_time_s": st,
                        "tokens": 16384,
                        "tokens_nonpad": 9000,
                        "samples": 8,
                        "tokens_per_s": 16384 / st,
                        "tokens_nonpad_per_s": 9000 / st,
                        "samples_per_s": 80.0,
                        "mfu": 0.29,
                        "peak_mem_gib": [28.7, 28.7],
                        "time": time.time(),
                    }
                )
                + "\n"
            )
            next_metric += 1 / metrics_hz
        time.sleep(tick)
    log.close()
    met.close()
    (run / "writer_done.json").write_text(
        json.dumps({"lines": written, "progress": progress, "steps": step})
    )


async def drive(run: Path, seconds: float, size: tuple[int, int]) -> dict[str, Any]:
    import psutil
    from textual import events
    from textual.app import App
    from textual.binding import Binding

    from backend.monitor import StaticOwner, TraceReplaySource
    from screens.monitor import MonitorScreen
    from widgets.log_pane import LogPane
    from widgets.loss_chart import LossChart
    from widgets.throughput import ThroughputMeter

    sent: list[float] = []
    latencies: list[float] = []

    class Bench(App[None]):
        BINDINGS = [Binding("f12", "probe", "probe", id="bench.probe")]

        def on_mount(self) -> None:
            self.push_screen(
                MonitorScreen(
                    run,
                    gpu_source=lambda _o: TraceReplaySource(
                        TRACE, owner=StaticOwner(frozenset({941, 942})), loop=True
                    ),
                )
            )

        def action_probe(self) -> None:
            latencies.append(time.perf_counter() - sent.pop(0))

    app = Bench()
    frames = 0
    proc = psutil.Process()
    async with app.run_test(size=size) as pilot:
        original = app._display

        def counting(screen: Any, renderable: Any) -> None:
            nonlocal frames
            if renderable is not None:
                frames += 1
            original(screen, renderable)

        app._display = counting  # type: ignore[method-assign]
        await pilot.pause()
        load0 = os.getloadavg()[0]
        cpu0 = proc.cpu_times()
        t0 = time.monotonic()
        rss_peak = 0
        while time.monotonic() - t0 < seconds:
            sent.append(time.perf_counter())
            app.post_message(events.Key("f12", None))
            await asyncio.sleep(0.25)
            rss_peak = max(rss_peak, proc.memory_info().rss)
        wall = time.monotonic() - t0
        cpu1 = proc.cpu_times()
        while not (run / "writer_done.json").exists():
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # let the followers catch up with the last bytes
        await pilot.pause()
        pane = app.screen.query_one(LogPane)
        meter = app.screen.query_one(ThroughputMeter)
        shown_lines = pane.model.total
        shown_step = meter.summary.step if meter.summary else 0
        counts = dict(pane.model.counts)
        chart_draws = app.screen.query_one(LossChart).draws
    done = json.loads((run / "writer_done.json").read_text())
    lat_ms = sorted(x * 1000 for x in latencies)
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "seconds": round(wall, 1),
        "loadavg_1m_start": round(load0, 2),
        "terminal": f"{size[0]}x{size[1]}",
        "lines_written": done["lines"],
        "log_lines_expected": done["lines"] - done["progress"],
        "log_lines_shown_total": shown_lines,
        "metrics_steps_written": done["steps"],
        "metrics_step_shown": shown_step,
        "flag_counts": counts,
        "keypresses": len(lat_ms),
        "key_latency_ms_median": round(statistics.median(lat_ms), 1) if lat_ms else None,
        "key_latency_ms_p95": round(lat_ms[int(0.95 * (len(lat_ms) - 1))], 1) if lat_ms else None,
        "key_latency_ms_max": round(lat_ms[-1], 1) if lat_ms else None,
        "frames": frames,
        "frames_per_s": round(frames / wall, 1),
        "cpu_percent_of_one_core": round(100 * cpu / wall, 1),
        "peak_rss_mib": round(
            max(rss_peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**20, 1
        ),
        "cpus": os.cpu_count(),
        "loadavg_1m_end": round(os.getloadavg()[0], 2),
        "chart_draws": chart_draws,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rate", type=int, default=20_000, help="log lines per second")
    ap.add_argument("--metrics-hz", type=float, default=10)
    ap.add_argument("--size", default="120x40")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--writer", metavar="RUN_DIR", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.writer:
        writer(Path(args.writer), args.rate, args.seconds, args.metrics_hz)
        return
    run = Path(tempfile.mkdtemp(prefix="monitor-bench-")) / "runs" / "bench-run"
    run.mkdir(parents=True)
    (run / "status.json").write_text(
        json.dumps({"run_id": "bench-run", "runner": "host", "state": "running", "pid": None})
    )
    w, h = (int(x) for x in args.size.split("x"))
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--writer",
            str(run),
            "--rate",
            str(args.rate),
            "--seconds",
            str(args.seconds),
            "--metrics-hz",
            str(args.metrics_hz),
        ]
    )
    try:
        result = asyncio.run(drive(run, args.seconds, (w, h)))
    finally:
        child.wait(timeout=args.seconds + 30)
    result.update(rate_lines_per_s=args.rate, metrics_hz=args.metrics_hz)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "monitor_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
