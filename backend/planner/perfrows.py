"""Real-data benchmark rows (docs/gpu/perf/rows.jsonl) re-predicted by the CURRENT planner.

Each row describes a measured configuration in the planner's own terms (model, micro-batch,
grad accumulation, packing, Liger, recompute, FSDP, optimizer); ``repredict`` plans it with the
measured token lengths on one H200 and 128 GiB of host RAM, so the benchmark table and the
tests compare today's model with the measurement, never with a stored prediction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.planner.gpu import GIB, gpu_spec
from backend.planner.realdata import LengthDist
from backend.planner.settings import TrainSettings
from backend.planner.shape import ModelShape, shape_from_config
from backend.planner.tune import Estimate, estimate

MODELS: dict[str, dict[str, int]] = {
    "3.37b": {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
              "num_attention_heads": 24, "vocab_size": 32000},
    "6.74b": {"hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "vocab_size": 32000},
}  # fmt: skip
HOST_RAM = 128 * GIB  # the nvidia-h200 machine's host


def load_rows(path: str | Path) -> list[dict[str, Any]]:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def row_shape(row: dict[str, Any]) -> ModelShape:
    return shape_from_config(MODELS[row["model"]], source=f"benchmark model {row['model']}")


def row_settings(row: dict[str, Any]) -> TrainSettings:
    packing = bool(row.get("packing"))
    return TrainSettings(
        micro_batch=int(row["micro_batch"]),
        grad_accum=int(row["grad_accum"]),
        seq=2048,
        fsdp=str(row.get("fsdp") or ""),
        trainer_gc=bool(row.get("gc")),
        attn="flex_attention" if packing else "sdpa",
        optim=str(row.get("optim") or "adamw_torch"),
        packing=packing,
        pack_tokens=int(row.get("pack_tokens") or 0),
        liger=bool(row.get("liger")),
    )


@dataclass
class Compared:
    row: dict[str, Any]
    estimate: Estimate

    @property
    def real_error(self) -> float | None:
        measured = self.row.get("real_tokens_per_s")
        return self.estimate.throughput.real_tokens_per_s / measured - 1 if measured else None

    @property
    def memory_error(self) -> float | None:
        measured = self.row.get("peak_alloc_gib")
        return self.estimate.memory.peak_allocated / GIB / measured - 1 if measured else None


def repredict(rows: list[dict[str, Any]], dist: LengthDist) -> list[Compared]:
    gpu = gpu_spec("h200")
    return [Compared(r, estimate(row_shape(r), row_settings(r), gpu, dist, HOST_RAM)) for r in rows]
