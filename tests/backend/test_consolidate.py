"""The wizard-side half of consolidating FSDP checkpoints: key names and the completeness check
(standard library only; the torch half runs in tests/integration/test_results_sharded.py)."""

from __future__ import annotations

import json
from pathlib import Path

from backend.entry.checkpoints import MARKER
from backend.entry.consolidate import hf_key, is_sharded, sharded_problem


def test_accelerate_keys_become_hugging_face_keys() -> None:
    hf = "model.layers.0.self_attn.q_proj.weight"
    assert hf_key("model." + hf, ("model", hf)) == hf  # DCP's planner_data path
    assert hf_key("model." + hf) == hf  # no planner data: accelerate's top-level "model."
    wrapped = "model.model.layers.0._fsdp_wrapped_module._checkpoint_wrapped_module.mlp.up.weight"
    assert hf_key(wrapped) == "model.layers.0.mlp.up.weight"
    assert hf_key("model._orig_mod.lm_head.weight") == "lm_head.weight"
    assert hf_key("model.module.lm_head.weight") == "lm_head.weight"


def _checkpoint(root: Path, step: int, *, marker: bool, metadata: bool) -> Path:
    path = root / f"checkpoint-{step}"
    (path / "pytorch_model_fsdp_0").mkdir(parents=True)
    (path / "trainer_state.json").write_text("{}")
    if metadata:
        (path / "pytorch_model_fsdp_0" / ".metadata").write_bytes(b"x")
    if marker:
        (path / MARKER).write_text(json.dumps({"step": step}))
    return path


def test_incomplete_sharded_checkpoints_are_named(tmp_path: Path) -> None:
    good = _checkpoint(tmp_path, 10, marker=True, metadata=True)
    unmarked = _checkpoint(tmp_path, 20, marker=False, metadata=True)
    no_meta = _checkpoint(tmp_path, 30, marker=True, metadata=False)
    assert is_sharded(good) and not is_sharded(tmp_path)
    assert sharded_problem(good) is None
    assert MARKER in (sharded_problem(unmarked) or "")
    assert "checkpoint-20" in (sharded_problem(unmarked) or "")
    problem = sharded_problem(no_meta) or ""
    assert "checkpoint-30" in problem and "pytorch_model_fsdp_0/.metadata" in problem
