"""Real CPU trainings through `trainwiz launch` with each per-layer option of the entry on:
regional torch.compile of the decoder layers, and selective recompute. The plan names the flag
exactly as passed, the entry's start line says what stayed on, the loss is finite every step,
and the saved model keeps the plain parameter names (tiny Llama, bundled conversations)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.model.tiny import make_tiny
from backend.preset.loader import load_preset

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

CASES = {
    "compile": ({"compile_layers": True}, "--compile_layers True",
                "compile: 2 decoder layers compiled", {"compile_layers": 2}),
    "recompute": ({"recompute_layers": 1}, "--recompute_layers 1",
                  "recompute: 1 of 2 decoder layers checkpointed", {"recompute_layers": 1}),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_model_trains_with_the_layer_option_on(tmp_path: Path, case: str) -> None:
    fields, flag, line, start_fields = CASES[case]
    home = Path(os.environ["TRAINWIZ_HOME"])
    preset = load_preset(ROOT / "presets" / "tiny-cpu.yaml")
    assert preset.model.tiny is not None
    if not (home / "models" / "tiny-llama").is_dir():
        made = tmp_path / "tiny-llama"
        make_tiny(made, preset.model.tiny)
        shutil.copytree(made, home / "models" / "tiny-llama")
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = f"tiny-cpu-{case}"
    data["training"].update(max_steps=3, **fields)
    path = tmp_path / f"{case}.yaml"
    path.write_text(yaml.safe_dump(data))
    from tests.backend.test_tune_probe_cpu import _env  # torchrun on PATH, as a user has it

    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env=_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert flag in proc.stdout  # the plan names it exactly as the entry gets it
    run_dir = max((home / "runs").iterdir(), key=lambda p: p.stat().st_mtime)
    log = (run_dir / "train.log").read_text(encoding="utf-8", errors="replace")
    assert line in log
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    start = next(x for x in lines if x["kind"] == "start")
    assert {k: start.get(k) for k in start_fields} == start_fields
    steps = [x for x in lines if x["kind"] == "step"]
    assert len(steps) == 3 and all(math.isfinite(s["loss"]) for s in steps)
    from safetensors import safe_open

    saved = next((run_dir / "output").rglob("*.safetensors"))
    with safe_open(str(saved), "pt") as handle:
        keys = set(handle.keys())
    assert "model.layers.1.self_attn.q_proj.weight" in keys
    assert not any("_orig_mod" in k for k in keys)  # compiled layers save under their names
