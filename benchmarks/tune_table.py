#!/usr/bin/env python
"""Predicted vs measured for every probe row of a calibration file (docs/performance.md).

Each row of ``TRAINWIZ_HOME/calibration/<gpu>.jsonl`` (what `trainwiz tune` measured) is
shown with the base model's prediction stored in it (fitted constants, no correction; made from
that run's own lengths) and again with the machine correction learned from the rows BEFORE it
only (what the planner knew when it ranked that candidate): both are out of sample for these
runs, the second by construction.

    python benchmarks/tune_table.py docs/gpu/tune/calibration-final.jsonl [--lengths DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.planner.learned import correction
from backend.planner.settings import TrainSettings
from backend.planner.shape import shape_from_config

SHAPES = {  # n_params -> config, the benchmark models (benchmarks/perf_make_model.py)
    "3b": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
           "num_attention_heads": 24, "vocab_size": 32000},
    "7b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "vocab_size": 32000},
}  # fmt: skip


def shape_of(row: dict) -> object:
    name = "3b" if row["shape"]["layers"] == 28 else "7b"
    return shape_from_config(SHAPES[name], source=name)


def table(rows: list[dict]) -> list[dict]:
    out = []
    for i, row in enumerate(rows):
        if not row.get("measured_real_tokens_per_s"):
            out.append({**row, "base_err": None, "learned_err": None})
            continue
        shape = shape_of(row)
        s = TrainSettings(**row["settings"])
        # The base model's prediction stored with the row (made from that run's own lengths).
        base = float(row["predicted_real_tokens_per_s"])
        # Each method is corrected by its own rows only, as tune does (a LoRA row by LoRA rows).
        method = str(row.get("method") or "full")
        c = correction(rows[:i], shape, s, method)  # type: ignore[arg-type]
        learned = base / c.time
        got = float(row["measured_real_tokens_per_s"])
        out.append(
            {
                **row,
                "base_err": base / got - 1,
                "learned_err": learned / got - 1,
                "learned": learned,
                "prior_rows": i,
                "model": getattr(shape, "source", ""),
            }
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("calibration", type=Path)
    args = parser.parse_args()
    rows = [json.loads(x) for x in args.calibration.read_text().splitlines() if x.strip()]
    print(
        "| # | model | lengths (mean) | configuration | base model | learned from rows before "
        "| measured real tok/s | base err | learned err | peak GiB pred / measured | startup s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for i, r in enumerate(table(rows), 1):
        if r.get("base_err") is None:
            print(
                f"| {i} | | {r['lengths'].get('mean')} | {r['label']} | "
                f"{r['predicted_real_tokens_per_s']:,.0f} | - | OOM | - | - | "
                f"{r['predicted_peak_gib']} / > GPU | - |"
            )
            continue
        print(
            f"| {i} | {r['model']} | {r['lengths'].get('mean')} | {r['label']} | "
            f"{r['predicted_real_tokens_per_s']:,.0f} | {r['learned']:,.0f} ({r['prior_rows']}) | "
            f"{r['measured_real_tokens_per_s']:,.0f} | {r['base_err']:+.1%} | "
            f"{r['learned_err']:+.1%} | {r['predicted_peak_gib']} / {r['measured_peak_gib']:.1f} | "
            f"{r['startup_s']:.0f} |"
        )
    errs = [r for r in table(rows) if r.get("base_err") is not None]
    for key in ("base_err", "learned_err"):
        within = sum(abs(r[key]) <= 0.10 for r in errs)
        print(
            f"\n{key}: {within} of {len(errs)} within +-10%, worst "
            f"{max(errs, key=lambda r: abs(r[key]))[key]:+.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
