#!/usr/bin/env python
"""The hand-set LoRA/QLoRA rows of benchmarks/device/lora_sweep.sh, and each row's summary.

    python benchmarks/device/lora_configs.py NAME MODEL_DIR DATA STEPS > preset.yaml
    python benchmarks/device/lora_configs.py --summary NAME RESULTS RUN_DIR GPU_NAME

A row is the shipped ``vicuna-7b-lora-1x24g`` (r 8 on q/k/v/o, dropout 0.05) on the host runner
with the local model and data and no saves, changed by the fields below: kept here, not in the
shell script, so that the preset each row launches is one reviewable table.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
# tune's packed LoRA pick of 2026-12-06 (rows of 8192, b1 ga2, Liger, fused AdamW, regional
# compile, no recompute): every row starts from it.
PACKED = {"packing": True, "pack_tokens": 8192, "per_device_train_batch_size": 1,
          "gradient_accumulation_steps": 2, "gradient_checkpointing": False,
          "use_liger_kernel": True, "optim": "adamw_torch_fused", "compile_layers": True}  # fmt: skip
ALL_LINEAR = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ROWS: dict[str, dict[str, Any]] = {
    "p8192": {},
    "p8192-eager": {"compile_layers": False},
    # torch's own FlashAttention-2 varlen (backend/entry/varlen.py): the entry's default for
    # packed rows since 2026-12-09 (p8192 runs it where usable); -flex keeps flex_attention
    "p8192-varlen": {"env": {"TRAINWIZ_PACKED_ATTENTION": "varlen"}},
    "p8192-flex": {"env": {"TRAINWIZ_PACKED_ATTENTION": "flex"}},
    # regional compile with Liger's fused linear cross-entropy only (its RMSNorm, SwiGLU and
    # RoPE off, for inductor to fuse): ligerhook/sitecustomize.py reads the variable
    "p8192-flce": {"env": {"TRAINWIZ_BENCH_LIGER": "loss"}},
    "p8192-flce-d0": {"env": {"TRAINWIZ_BENCH_LIGER": "loss"}, "lora": {"lora_dropout": 0.0}},
    "p8192-nolig": {"use_liger_kernel": False},
    # inductor's coordinate-descent tuning of its fused kernels' launch configs (longer compile)
    "p8192-cdt": {"env": {"TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": "1"}},
    "p4096x2": {"pack_tokens": 4096, "per_device_train_batch_size": 2},
    "p8192-d0": {"lora": {"lora_dropout": 0.0}},
    "p16384-d0": {"pack_tokens": 16384, "gradient_accumulation_steps": 1,
                  "lora": {"lora_dropout": 0.0}},
    "p16384": {"pack_tokens": 16384, "gradient_accumulation_steps": 1},
    # what tune would pick at 16,384 with the preset's dropout, were its compile in budget
    "p16384-rc8": {"pack_tokens": 16384, "gradient_accumulation_steps": 1,
                   "recompute_layers": 8},
    # the same two on varlen attention: no flex compile inside the layer graph
    "p16384-rc8-varlen": {"pack_tokens": 16384, "gradient_accumulation_steps": 1,
                          "recompute_layers": 8, "env": {"TRAINWIZ_PACKED_ATTENTION": "varlen"}},
    "p16384-d0-varlen": {"pack_tokens": 16384, "gradient_accumulation_steps": 1,
                         "lora": {"lora_dropout": 0.0},
                         "env": {"TRAINWIZ_PACKED_ATTENTION": "varlen"}},
    "p8192x2-d0": {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                   "lora": {"lora_dropout": 0.0}},
    # the entry's packed dropout masks (backend/entry/lora_dropout.py) instead of PEFT's copies
    "p8192-packed": {"env": {"TRAINWIZ_DROPOUT_MASKS": "packed"}},
    "p16384-packed": {"pack_tokens": 16384, "gradient_accumulation_steps": 1,
                      "env": {"TRAINWIZ_DROPOUT_MASKS": "packed"}},
    "p8192-qv": {"lora": {"lora_target_modules": ["q_proj", "v_proj"]}},
    "p8192-all": {"lora": {"lora_target_modules": ALL_LINEAR}},
    "qlora-p8192": {"method": "qlora"},
    "qlora-p8192-eager": {"method": "qlora", "compile_layers": False},
    "pad-b4": {"packing": False, "pack_tokens": None, "per_device_train_batch_size": 4,
               "gradient_accumulation_steps": 2, "use_liger_kernel": False,
               "compile_layers": False, "optim": "adamw_torch"},
}  # fmt: skip


def preset(name: str, model: str, data: str, steps: int) -> dict[str, Any]:
    with open(ROOT / "presets" / "vicuna-7b-lora-1x24g.yaml") as fh:
        out = yaml.safe_load(fh)
    out["name"] = f"lora-sweep-{name}"
    out["description"] = f"benchmarks/device/lora_configs.py row {name}"
    out["model"] = {"source": "local", "dir": model}
    out.pop("environment", None)
    out.pop("container", None)
    out["launch"] = {"runner": "host", "entry": "trainwiz", "device": "cuda", "nproc_per_node": 1}
    tr = out["training"]
    for key in ("save_steps", "save_total_limit", "per_device_eval_batch_size"):
        tr.pop(key, None)
    tr.update(data_path=data, output_dir="@run/output", save_strategy="no", report_to="none",
              seed=42, max_steps=steps, **PACKED)  # fmt: skip
    for key, value in ROWS[name].items():
        if key == "lora":
            tr["lora"].update(value)
        elif key == "env":
            out["launch"]["env"] = dict(value)
        elif value is None:
            tr.pop(key, None)
        else:
            tr[key] = value
    return out


def _load(path: str, default: Any = None) -> Any:
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return default


def summary(name: str, results: str, run: str, gpu_name: str) -> dict[str, Any]:
    """Median of the steps from the 4th on (the first compiles), beside the plan's prediction."""
    try:
        with open(f"{run}/metrics.jsonl") as fh:
            lines = [json.loads(x) for x in fh if x.strip()]
    except OSError:
        lines = []
    steps = [x for x in lines if x.get("kind") == "step"]
    end: dict[str, Any] = next((x for x in lines if x.get("kind") == "end"), {})
    start: dict[str, Any] = next((x for x in lines if x.get("kind") == "start"), {})
    warm = [s for s in steps if s.get("step", 0) >= 4] or steps
    est = (_load(f"{results}/{name}.plan.json", {}) or {}).get("estimate") or {}
    thr, mem = est.get("throughput") or {}, est.get("memory") or {}

    def med(key: str) -> float | None:
        vals = [s[key] for s in warm if s.get(key) is not None]
        return round(statistics.median(vals), 1) if vals else None

    measured, predicted = med("tokens_nonpad_per_s"), thr.get("real_tokens_per_s")
    prof = _load(f"{run}/profile.json", {}) or {}
    wall = prof.get("wall_s") or 0
    peaks = [max(s["peak_mem_gib"]) for s in steps if s.get("peak_mem_gib")]
    with open(f"{results}/{name}.yaml") as fh:
        tr = yaml.safe_load(fh)["training"]
    return {
        "row": name, "device": gpu_name, "run": run.rsplit("/", 1)[-1],
        "state": (_load(f"{run}/status.json", {}) or {}).get("state"),
        "settings": {k: tr.get(k) for k in ("method", "pack_tokens", "per_device_train_batch_size",
                     "gradient_accumulation_steps", "compile_layers", "use_liger_kernel")},
        "lora": {k: tr["lora"].get(k) for k in ("lora_dropout", "lora_target_modules")},
        "entry": {k: start.get(k) for k in ("attn_implementation", "use_liger_kernel",
                  "compile_layers", "packing", "method", "trainable_params")},
        "predicted_real_tokens_per_s": round(predicted, 1) if predicted else None,
        "measured_real_tokens_per_s": measured,
        "error_pct": round(100 * (predicted / measured - 1), 1) if predicted and measured else None,
        "predicted_peak_gib": round(mem["peak_allocated"] / 2**30, 2)
        if mem.get("peak_allocated") else None,
        "measured_peak_gib": max(peaks) if peaks else None,
        "step_time_s": med("step_time_s"), "steps": len(steps),
        "first_step_s": steps[0].get("step_time_s") if steps else None,
        "loss_first_last": [steps[0].get("loss"), steps[-1].get("loss")] if steps else None,
        "end_ok": end.get("ok"), "end_error": (end.get("error") or "")[:300] or None,
        "env": (yaml.safe_load(open(f"{results}/{name}.yaml"))["launch"].get("env") or None),
        # the profiled steps (TRAINWIZ_PROFILE_STEPS): wall, GPU busy and kernel time by kind
        "profile": {"steps": prof.get("count"), "wall_s": round(wall, 3),
                    "gpu_busy_share": round(prof.get("gpu_busy_s", 0) / wall, 3),
                    "share_of_wall": {k: round(v / wall, 3)
                                      for k, v in (prof.get("by_kind_s") or {}).items()}}
        if wall else (prof.get("error") or None),
    }  # fmt: skip


def main(argv: list[str]) -> int:
    if argv[:1] == ["--summary"]:
        print(json.dumps(summary(*argv[1:5])))
        return 0
    name, model, data, steps = argv[:4]
    if name not in ROWS:
        print(f"unknown row {name}: {', '.join(ROWS)}", file=sys.stderr)
        return 2
    yaml.safe_dump(preset(name, model, data, int(steps)), sys.stdout, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
