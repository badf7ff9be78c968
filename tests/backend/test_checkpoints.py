"""Checkpoint completeness, rotation, the eval split and the continued metrics series.

The training runs themselves are in tests/integration/test_resume_host.py; these pin the rules
those runs depend on, on real folders.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import ValidationError

from backend.entry import ENTRY_DIR
from backend.entry.checkpoints import (
    MARKER,
    complete_checkpoints,
    incomplete_after,
    latest_complete,
    rotate,
    write_marker,
)
from backend.monitor.metrics import EvalRecord, continued_series, event_from_json
from backend.preset.schema import Preset


def make_checkpoint(root: Path, step: int, *, marker: bool, state: bool = True) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"w" * 16)
    if state:
        (path / "trainer_state.json").write_text("{}")
    if marker:
        write_marker(path, {"step": step})
    return path


def test_only_marked_checkpoints_are_complete_and_the_newest_wins(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, 10, marker=True)
    make_checkpoint(tmp_path, 20, marker=True)
    make_checkpoint(tmp_path, 30, marker=False)  # its save was killed: state written, no marker
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [10, 20]
    assert latest_complete(tmp_path) == tmp_path / "checkpoint-20"
    assert incomplete_after(tmp_path, 20) == [tmp_path / "checkpoint-30"]
    assert json.loads((tmp_path / "checkpoint-20" / MARKER).read_text()) == {"step": 20}
    assert not list(tmp_path.glob("checkpoint-*/.*.tmp"))  # the marker's temp file is gone


def test_without_any_marker_trainer_state_is_the_evidence(tmp_path: Path) -> None:
    """Checkpoints of FastChat's own train.py (no trainwiz marker) still resume."""
    make_checkpoint(tmp_path, 5, marker=False)
    make_checkpoint(tmp_path, 8, marker=False, state=False)  # cut off before trainer_state
    assert latest_complete(tmp_path) == tmp_path / "checkpoint-5"
    assert latest_complete(tmp_path / "missing") is None


def test_rotation_keeps_the_newest_complete_and_never_touches_unmarked(tmp_path: Path) -> None:
    for step in (10, 20, 30, 40):
        make_checkpoint(tmp_path, step, marker=True)
    make_checkpoint(tmp_path, 5, marker=False)  # not ours to delete
    removed = rotate(tmp_path, 2, protect=str(tmp_path / "checkpoint-10"))
    assert removed == [tmp_path / "checkpoint-20"]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["checkpoint-10", "checkpoint-30", "checkpoint-40", "checkpoint-5"]


@pytest.fixture(scope="module")
def evalsplit() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tw_evalsplit", ENTRY_DIR / "evalsplit.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_eval_split_is_deterministic_and_disjoint(evalsplit: ModuleType, tmp_path: Path) -> None:
    held = evalsplit.held_out_indices(200, 0.05, 42)
    assert held == evalsplit.held_out_indices(200, 0.05, 42) and len(held) == 10
    assert held != evalsplit.held_out_indices(200, 0.05, 43)
    assert len(evalsplit.held_out_indices(3, 0.01, 1)) == 1  # at least one, never all

    data = [{"id": str(i), "conversations": []} for i in range(40)]
    (tmp_path / "d.json").write_text(json.dumps(data))

    class Args:
        data_path = str(tmp_path / "d.json")
        eval_data_path = None

    args = Args()
    assert evalsplit.split_data(args, 0.1, 7) == (36, 4)
    train = {d["id"] for d in json.loads(Path(args.data_path).read_text())}
    evals = {d["id"] for d in json.loads(Path(args.eval_data_path).read_text())}
    assert not train & evals and len(train | evals) == 40


def test_a_resumed_attempt_replaces_the_steps_past_its_checkpoint() -> None:
    lines = [{"kind": "start", "attempt": 1}]
    lines += [{"kind": "step", "step": i, "loss": 10.0 - i, "attempt": 1} for i in (1, 2, 3)]
    lines += [{"kind": "eval", "step": 2, "eval_loss": 5.0, "attempt": 1}]
    lines += [{"kind": "eval", "step": 3, "eval_loss": 4.0, "attempt": 1}]
    lines += [{"kind": "start", "attempt": 2, "resumed_from": 2}]
    lines += [{"kind": "step", "step": i, "loss": 20.0 - i, "attempt": 2} for i in (3, 4)]
    events = [e for e in (event_from_json(x) for x in lines) if e is not None]
    steps, evals = continued_series(events)
    assert [(s.step, s.attempt) for s in steps] == [(1, 1), (2, 1), (3, 2), (4, 2)]
    assert evals == [EvalRecord(2, 5.0, 1, None)]  # step 3's eval was of the lost attempt


def _preset(**training: object) -> dict:
    return {
        "schema": 1,
        "name": "t",
        "model": {"source": "local", "dir": "/m"},
        "launch": {"runner": "host", "device": "cpu"},
        "training": {"data_path": "d.json", "output_dir": "o", **training},
    }


def test_eval_split_satisfies_eval_strategy_and_excludes_eval_data_path() -> None:
    Preset.model_validate(_preset(eval_strategy="steps", eval_steps=5, eval_split=0.05))
    with pytest.raises(ValidationError, match="eval_split"):
        Preset.model_validate(_preset(eval_strategy="steps"))
    with pytest.raises(ValidationError, match="both set"):
        Preset.model_validate(_preset(eval_split=0.1, eval_data_path="e.json"))
    with pytest.raises(ValidationError):
        Preset.model_validate(_preset(eval_split=0.7))
    fastchat_own = _preset(save_minutes=30)
    fastchat_own["launch"]["entry"] = "fastchat-train-mem"
    with pytest.raises(ValidationError, match=r"save_minutes needs launch\.entry"):
        Preset.model_validate(fastchat_own)


def test_entry_only_options_reach_only_the_trainwiz_entry() -> None:
    from backend.plan.hf_flags import training_flags

    args = Preset.model_validate(_preset(eval_split=0.05, save_minutes=30)).training
    ours = training_flags(args, model_path="/m", target_transformers="4.57.6", trainwiz_entry=True)
    theirs = training_flags(
        args, model_path="/m", target_transformers="4.57.6", trainwiz_entry=False
    )
    assert ours[ours.index("--eval_split") + 1] == "0.05"
    assert ours[ours.index("--save_minutes") + 1] == "30"
    assert "--eval_split" not in theirs and "--save_minutes" not in theirs


def test_the_monitor_view_carries_eval_points_beside_train_loss() -> None:
    from backend.monitor.tracker import RunTracker

    tracker = RunTracker("metrics")
    lines = [{"kind": "step", "step": i, "loss": 3.0 - i / 10} for i in range(1, 5)]
    lines += [
        {"kind": "eval", "step": 2, "eval_loss": 2.9},
        {"kind": "eval", "step": 4, "eval_loss": 2.7},
    ]
    lines += [{"kind": "eval", "step": 4, "eval_loss": 2.6}]  # a resumed attempt's, same step
    tracker.update([e for e in (event_from_json(x) for x in lines) if e is not None])
    view = tracker.view()
    assert view.eval_loss == ([2.0, 4.0], [2.9, 2.6])
    assert view.loss[0] == [1.0, 2.0, 3.0, 4.0]
