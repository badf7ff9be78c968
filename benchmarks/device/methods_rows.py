#!/usr/bin/env python
"""Rows of the LoRA/QLoRA/ZeRO device runs (benchmarks/device/methods7b.sh): measured vs planned.

For each run folder under the results dir: steady-state median tokens/s (padded and real) over
the steps after the first 3 (warm-up, first-step allocation), peak allocated GiB (the entry's
torch.cuda.max_memory_allocated), host RAM peak (MemTotal - MemAvailable, sampled at 2 Hz, so it
includes the page cache of the model files), and the plan's prediction of each. One JSON line
per run in rows.jsonl and a Markdown table on stdout.

    python benchmarks/device/methods_rows.py RESULTS_DIR
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

GIB = 1024**3


def row(root: Path, name: str) -> dict:
    out: dict = {"name": name}
    lines = []
    metrics = root / name / "metrics.jsonl"
    if metrics.is_file():
        lines = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    steps = [x for x in lines if x.get("kind") == "step"]
    out["state"] = json.loads((root / name / "status.json").read_text()).get("state") if (
        root / name / "status.json").is_file() else None  # fmt: skip
    out["steps"] = len(steps)
    steady = steps[3:] or steps

    def med(key: str) -> float | None:
        vals = [x[key] for x in steady if isinstance(x.get(key), (int, float))]
        return round(statistics.median(vals), 1) if vals else None

    out["tokens_per_s"], out["real_tokens_per_s"] = med("tokens_per_s"), med("tokens_nonpad_per_s")
    out["step_time_s"], out["mfu"] = med("step_time_s"), med("mfu")
    peaks = [max(x["peak_mem_gib"]) for x in steps if x.get("peak_mem_gib")]
    out["peak_alloc_gib"] = max(peaks) if peaks else None
    out["first_step_s"] = steps[0].get("step_time_s") if steps else None
    out["loss_first_last"] = [steps[0].get("loss"), steps[-1].get("loss")] if steps else None
    kib = root / f"{name}.hostmem_kib"
    out["host_ram_peak_gib"] = round(int(kib.read_text()) / 1048576, 1) if kib.is_file() else None
    plan = root / f"plan-{name}.json"
    try:
        est = json.loads(plan.read_text())["estimate"]
        out["pred_tokens_per_s"] = est["throughput"]["tokens_per_s"]
        out["pred_real_tokens_per_s"] = est["throughput"].get("real_tokens_per_s")
        out["pred_step_time_s"] = est["throughput"].get("step_time_s")
        out["pred_peak_alloc_gib"] = round(est["memory"]["peak_allocated"] / GIB, 1)
        out["pred_host_ram_gib"] = round(est["memory"]["host_ram_peak"] / GIB, 1)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        out["plan_error"] = repr(exc)[:200]
    start = next((x for x in lines if x.get("kind") == "start"), {})
    out["method"] = start.get("method")
    end = next((x for x in lines if x.get("kind") == "end"), {})
    out["ok"] = end.get("ok")
    return out


def main() -> None:
    root = Path(sys.argv[1])
    names = [p.name for p in sorted(root.iterdir()) if (p / "status.json").is_file()]
    rows = [row(root, n) for n in names]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(
        "| run | state | steps | tok/s meas / pred | real tok/s meas / pred | peak alloc GiB meas / pred | host RAM GiB meas / pred | first step s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['name']} | {r['state']} | {r['steps']} | {r['tokens_per_s']} / {r.get('pred_tokens_per_s')} | "
            f"{r['real_tokens_per_s']} / {r.get('pred_real_tokens_per_s')} | {r['peak_alloc_gib']} / "
            f"{r.get('pred_peak_alloc_gib')} | {r['host_ram_peak_gib']} / {r.get('pred_host_ram_gib')} | {r['first_step_s']} |"
        )
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
