"""Calibration rows (real GPU measurements) turned back into planner inputs, and the acceptance.

Both the benchmark's ``--table`` and the tests re-predict every measured configuration with the
CURRENT planner from the row's own description (model, GPUs, batch, checkpointing, offload), so
the predictions stored in a row at measurement time never stand in for today's model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.planner.gpu import GpuSpec
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape, shape_from_config
from backend.planner.tune import Estimate, candidates, estimate
from backend.units import gib as units_gib

# The models the grid builds (benchmarks/calibrate_gpu.py): the notes' 1.35B and an
# OpenLLaMA-3B-shaped 3.43B (head_dim 100, which SDPA cannot run on its fused kernels).
MODELS: dict[str, dict[str, int]] = {
    "1b": {"hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 24,
           "num_attention_heads": 16, "vocab_size": 32000},
    "3b": {"hidden_size": 3200, "intermediate_size": 8640, "num_hidden_layers": 26,
           "num_attention_heads": 32, "vocab_size": 32000},
    "tiny": {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2,
             "num_attention_heads": 4, "vocab_size": 2000},
}  # fmt: skip
SEQ = 2048


def grid_settings(
    nproc: int, micro: int, ga: int, ckpt: str, offload: bool, seq: int = SEQ
) -> TrainSettings:
    """The grid's FSDP settings (full_shard auto_wrap, bf16, SDPA) for one configuration."""
    return TrainSettings(
        micro_batch=micro,
        grad_accum=ga,
        seq=seq,
        nproc=nproc,
        fsdp="full_shard auto_wrap" + (" offload" if offload else ""),
        trainer_gc=ckpt == "trainer",
        fsdp_ac=ckpt == "fsdp",
        attn="sdpa",
    )


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """Rows of the first H200 session (tests/fixtures/h200) carry only a tag: read it."""
    if "model" in row:
        return row
    tag = row["tag"]
    micro = int(tag.split("_bs")[1][0])
    ckpt = "none" if "nogc" in tag else "trainer"
    return {
        **row,
        "model": "1b",
        "micro_batch": micro,
        "grad_accum": 1,
        "checkpointing": ckpt,
        "offload": "offload" in tag,
        "seq": SEQ,
        "oom": False,
        "ok": True,
    }


def load_rows(paths: list[str | Path]) -> list[dict[str, Any]]:
    rows = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(normalize(json.loads(line)))
    return rows


def row_shape(row: dict[str, Any]) -> ModelShape:
    return shape_from_config(MODELS[row["model"]], source=f"calibration model {row['model']}")


def row_settings(row: dict[str, Any]) -> TrainSettings:
    return grid_settings(
        int(row["world"]),
        int(row["micro_batch"]),
        int(row["grad_accum"]),
        str(row["checkpointing"]),
        bool(row["offload"]),
        int(row.get("seq", SEQ)),
    )


def repredict(row: dict[str, Any], gpu: GpuSpec) -> Estimate:
    return estimate(row_shape(row), row_settings(row), gpu)


def rel_error(pred: float, measured: float | None) -> float | None:
    return pred / measured - 1 if measured else None


@dataclass
class TunedCheck:
    model: str
    world: int
    pick: TrainSettings
    measured: float | None  # tokens/s of the picked configuration, if the grid has it
    best: float  # best tokens/s measured for this model and GPU count
    best_tag: str

    @property
    def ratio(self) -> float | None:
        return self.measured / self.best if self.measured else None


def checkpointing_of(s: TrainSettings) -> str:
    return "fsdp" if s.fsdp_ac else ("trainer" if s.trainer_gc else "none")


def tuned_checks(rows: list[dict[str, Any]], gpu: GpuSpec) -> list[TunedCheck]:
    """Per model and GPU count: what tune's search picks from the seed's settings (offload,
    batch 1, Trainer checkpointing; batch free up to 8) and how fast that really ran."""
    out = []
    for model, world in sorted({(r["model"], int(r["world"])) for r in rows}):
        group = [r for r in rows if r["model"] == model and r["world"] == world and r.get("ok")]
        if not group:
            continue
        shape = shape_from_config(MODELS[model])
        seed = grid_settings(world, 1, 1, "trainer", True)
        pool = candidates(seed, fsdp_ac_ok=True, free_batch=True, max_micro_batch=8)
        ests = [estimate(shape, s, gpu) for s in pool]
        safe = [e for e in ests if e.memory.fits and not e.memory.tight] or [
            e for e in ests if e.memory.fits
        ]
        pick = max(safe, key=lambda e: e.throughput.tokens_per_s).settings
        key = (pick.micro_batch, pick.grad_accum, checkpointing_of(pick), pick.offload)
        match = [
            r
            for r in group
            if (r["micro_batch"], r["grad_accum"], r["checkpointing"], r["offload"]) == key
        ]
        best = max(group, key=lambda r: r["tokens_per_s"])
        out.append(
            TunedCheck(
                model,
                world,
                pick,
                max(r["tokens_per_s"] for r in match) if match else None,
                best["tokens_per_s"],
                best["tag"],
            )
        )
    return out


gib = units_gib  # calibration rows and plan sentences round GiB alike (backend/units.py)
