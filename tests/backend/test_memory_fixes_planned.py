"""Fixes for a memory failure agree with the planner (backend/runs/memfixes.py): tune's answer
comes first, fixes the plan says close the gap next, and the rest are marked as not enough.

Before: for an 8B full fine-tune that ran out of GPU memory on one 80 GB GPU, ``trainwiz
diagnose`` offered halving the batch, gradient checkpointing, FSDP CPU offload and a shorter
``model_max_length``, none of which closes the gap, and not tune's own answer (LoRA).

The machine's GPU and RAM are the stated H100 node of tests/backend/test_plan_gate.py; the log is
a real CUDA OOM (tests/fixtures/logcorpus, its source in SOURCES.tsv).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.diagnosis import diagnose_file
from backend.planner.gpu import gpu_spec
from backend.planner.shape import shape_for_preset
from backend.planner.tune import tune
from backend.preset.loader import save_preset
from backend.runs.memfixes import judge_memory_fixes
from backend.runs.plangate import plan_verdict
from tests.backend.test_plan_gate import GIB, gpu_preset, h100_here  # noqa: F401 (fixture)
from tests.trainwiz_cli import ROOT
from tui.cli import main

OOM_LOG = ROOT / "tests/fixtures/logcorpus/cuda_oom/fastchat-1781-vicuna7b-a100-40g.log"


def test_tunes_answer_first_and_fixes_that_cannot_close_the_gap_marked(
    tmp_path: Path,
    h100_here: None,  # noqa: F811
) -> None:
    preset = gpu_preset(tmp_path)  # 8B full fine-tune, one H100: DOES NOT FIT by the plan
    before = diagnose_file(OOM_LOG, preset=preset)
    oom = next(f for f in before.findings if f.category == "cuda_oom")
    offered = [fix.title for fix in oom.fixes]
    assert offered and all(fix.plan_fits is None for fix in oom.fixes)

    assert judge_memory_fixes(before.findings, preset)
    first, *rest = oom.fixes
    tuned = tune(preset, gpu_spec("h100"), shape_for_preset(preset), host_ram=512 * GIB)
    assert first.plan_fits is True and first.title.startswith("tune's answer")
    assert [(c.path, c.value) for c in first.changes] == [(c.path, c.new) for c in tuned.changes]
    assert ("training.method", "lora") in [(c.path, c.value) for c in first.changes]
    # every fix the classifier offered is still there, each with the plan's word on it
    assert sorted(fix.title for fix in rest) == sorted(offered)
    for fix in rest:
        assert fix.plan_fits is False, fix.title  # none of them fits 8B full on one GPU
        assert "the plan: not enough on its own (DOES NOT FIT: predicted peak" in fix.reason


def test_where_the_plan_says_it_fits_the_classifiers_fixes_stand(
    tmp_path: Path,
    h100_here: None,  # noqa: F811
) -> None:
    preset = gpu_preset(tmp_path, model_max_length=512, per_device_train_batch_size=1)
    preset = preset.model_copy(update={"training": preset.training.model_copy(
        update={"method": "lora"})})  # fmt: skip
    verdict = plan_verdict(preset, with_fix=False)
    assert verdict is not None and verdict.fits
    diagnosis = diagnose_file(OOM_LOG, preset=preset)
    before = [(f.title, f.reason) for f in diagnosis.findings[0].fixes]
    assert not judge_memory_fixes(diagnosis.findings, preset)  # fragmentation, a spike: not ours
    assert [(f.title, f.reason) for f in diagnosis.findings[0].fixes] == before


def test_diagnose_json_carries_the_plans_word(
    tmp_path: Path,
    h100_here: None,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = save_preset(gpu_preset(tmp_path), tmp_path / "big.yaml")
    code = main(["diagnose", str(OOM_LOG), "--preset", str(path), "--json"])
    assert code == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    fixes = next(f for f in findings if f["category"] == "cuda_oom")["fixes"]
    assert fixes[0]["plan_fits"] is True and fixes[0]["title"].startswith("tune's answer")
    assert all(fix["plan_fits"] is False for fix in fixes[1:])
