"""The OOM fallback's parts: the candidate chain, its record, the decision rule, the switch.

The chain is tune's ranking walked (backend/planner/fallback.py); the rule and the switch are
backend/runs/fallback.py, exercised on a real run directory (create_run_dir) without training.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import yaml

from backend.diagnosis import diagnose_text
from backend.planner.fallback import GPU_ENV, MAX_FALLBACKS, describe, fallback_chain
from backend.planner.settings import settings_from_preset
from backend.preset.loader import load_preset
from backend.rundir import LAUNCH, METRICS, PRESET, create_run_dir, read_status
from backend.runs.fallback import (
    FALLBACK,
    FIRST_STEPS,
    attempt_steps,
    current_candidate,
    fall_back,
    final_record,
    next_after,
)

ROOT = Path(__file__).resolve().parents[2]
# What torch 2.13 printed in a real run under RLIMIT_AS (tests/faults/test_oom_fallback.py).
CPU_ALLOC = (
    "[rank0]: RuntimeError: [enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
    "can't allocate memory: you tried to allocate 67108864 bytes. Error code 12 (Cannot "
    "allocate memory)"
)


def big_batch_preset(tmp_path: Path, **launch: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(launch)
    data["training"].update(
        per_device_train_batch_size=64, gradient_accumulation_steps=1, model_max_length=512
    )
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_chain_starts_with_the_launch_and_needs_less_memory_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(GPU_ENV, "h200")
    preset = load_preset(big_batch_preset(tmp_path))
    chain, why = fallback_chain(preset)
    assert why == "" and 2 <= len(chain) <= 1 + MAX_FALLBACKS
    assert [c.number for c in chain] == list(range(1, len(chain) + 1))
    first = chain[0]
    assert first.overrides == {} and first.words == "b64 no-recompute"
    gpu = [c.predicted_gpu_gib for c in chain]
    assert all(a > b for a, b in itertools.pairwise(gpu))
    for cand in chain[1:]:
        # The overrides are exactly what differs, and they give the candidate's settings.
        data = preset.model_dump(mode="json", exclude_unset=True)
        for path, value in cand.overrides.items():
            section, name = path.split(".")
            data.setdefault(section, {})[name] = value
        again = type(preset).model_validate(data)
        assert describe(settings_from_preset(again)) == cand.words
        assert cand.overrides.keys() <= {
            "training.per_device_train_batch_size",
            "training.gradient_accumulation_steps",
            "training.gradient_checkpointing",
        }
    # The global batch is tune's to keep: every candidate trains 64 sequences per step.
    assert all(
        c.preset.training.per_device_train_batch_size
        * c.preset.training.gradient_accumulation_steps
        == 64
        for c in chain
    )


def test_no_chain_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(GPU_ENV, raising=False)
    chain, why = fallback_chain(load_preset(big_batch_preset(tmp_path)))
    assert chain == [] and "CPU" in why
    monkeypatch.setenv(GPU_ENV, "h200")
    chain, why = fallback_chain(load_preset(big_batch_preset(tmp_path, oom_fallback=False)))
    assert chain == [] and "launch.oom_fallback: false" in why


def test_oom_fallback_field_is_a_bool_named_in_the_error(tmp_path: Path) -> None:
    from backend.errors import BadInput

    path = big_batch_preset(tmp_path)
    path.write_text(path.read_text().replace("runner: host", "runner: host\n  oom_fallback: maybe"))
    with pytest.raises(BadInput, match=r"launch\.oom_fallback"):
        load_preset(path)


def test_host_allocation_failures_are_host_oom() -> None:
    for line in (
        CPU_ALLOC,
        "RuntimeError: DefaultCPUAllocator: not enough memory: you tried to allocate 4096 bytes.",
        "MemoryError",
        "OSError: [Errno 12] Cannot allocate memory",
    ):
        top = diagnose_text(f"Traceback (most recent call last):\n{line}\n").top
        assert top is not None and top.category == "host_oom", line
    assert diagnose_text("    except MemoryError:\n").top is None
    top = diagnose_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB").top
    assert top is not None and top.category == "cuda_oom"


CANDS = [
    {"number": 1, "words": "b8 no-recompute", "predicted_gpu_gib": 70.0, "predicted_host_gib": 20},
    {"number": 2, "words": "b8 + recompute", "predicted_gpu_gib": 60.0, "predicted_host_gib": 30,
     "spec": {"train": {"argv": ["2"]}}},
    {"number": 3, "words": "b4 + recompute", "predicted_gpu_gib": 50.0, "predicted_host_gib": 20,
     "spec": {"train": {"argv": ["3"]}}},
]  # fmt: skip


@pytest.mark.parametrize(
    ("current", "category", "steps", "expect", "why"),
    [
        (1, "cuda_oom", 0, 2, ""),
        (1, "cuda_oom", FIRST_STEPS, 2, ""),
        (1, "cuda_oom", FIRST_STEPS + 1, None, "after 11 steps"),
        (1, "host_oom", 1, 3, ""),  # candidate 2 needs more host RAM: skipped
        (2, "cuda_oom", 0, 3, ""),
        (3, "cuda_oom", 0, None, "no candidate after 3 of 3"),
        (1, "nccl", 0, None, "not an out-of-memory"),
        (1, None, 0, None, "not an out-of-memory"),
    ],
)
def test_decision_rule(
    current: int, category: str | None, steps: int, expect: int | None, why: str
) -> None:
    chosen, reason = next_after(CANDS, current, category, steps)
    assert (chosen["number"] if chosen else None) == expect
    assert why in reason
    assert next_after([], 1, "cuda_oom", 0)[0] is None


def test_switch_rewrites_the_run_and_records_why(tmp_path: Path) -> None:
    run_dir = create_run_dir("fb", "host")
    spec = {"runner": "host", "prepare": [], "notes": [], "train": {"argv": ["1"], "env": {}}}
    (run_dir / LAUNCH).write_text(json.dumps(spec))
    (run_dir / PRESET).write_text("launched\n")
    cands = [dict(c) for c in CANDS]
    cands[1]["preset_yaml"] = "candidate 2\n"
    cands[1]["overrides"] = {"training.gradient_checkpointing": True}
    (run_dir / FALLBACK).write_text(json.dumps({"candidates": cands}))
    step = {"kind": "step", "step": 1, "attempt": 1, "tokens_nonpad": 10}
    (run_dir / METRICS).write_text(json.dumps(step) + "\n")
    assert attempt_steps(run_dir, 1) == (1, 1) and attempt_steps(run_dir, 2) == (0, None)
    ended = {"attempt": 1, "diagnosis_category": "cuda_oom", "diagnosis": "cuda_oom: CUDA out"}
    log = (tmp_path / "log").open("wb")
    switched = fall_back(run_dir, spec, ended, [ended], log)
    assert switched is not None
    new_spec, fields = switched
    assert new_spec["train"] == {"argv": ["2"]} and new_spec["runner"] == "host"
    assert json.loads((run_dir / LAUNCH).read_text()) == new_spec
    assert (run_dir / PRESET).read_text() == "candidate 2\n"
    assert fields["candidate"] == 2 and fields["candidate_of"] == 3
    assert fields["overrides"] == {"training.gradient_checkpointing": True}
    assert fields["fallback_after"] == {
        "attempt": 1, "cause": "cuda_oom", "diagnosis": "cuda_oom: CUDA out", "steps": 1,
    }  # fmt: skip
    said = (
        "GPU OOM at step 2 with b8 no-recompute; restarted with b8 + recompute (candidate 2 of 3)"
    )
    status = read_status(run_dir)
    assert status.message == said and (status.model_extra or {})["fallback"] == said
    log.close()
    assert said in (tmp_path / "log").read_text()
    # The record: attempt 2 on candidate 2; the final message names it.
    attempts = [ended, {"attempt": 2, "how": "oom_fallback", "candidate": 2}]
    assert current_candidate(attempts) == 2
    (run_dir / "attempts.json").write_text(json.dumps(attempts))
    assert (
        final_record(run_dir, "finished", None)[0]
        == "finished (on candidate 2 of 3, b8 + recompute, after an OOM fallback)"
    )


def test_oom_without_candidates_is_the_cause(tmp_path: Path) -> None:
    run_dir = create_run_dir("fb2", "host")
    ended = {"attempt": 1, "diagnosis_category": "host_oom", "exit_code": 1}
    (run_dir / "attempts.json").write_text(json.dumps([ended]))
    log = (tmp_path / "log").open("wb")
    assert fall_back(run_dir, {"train": {}}, ended, [ended], log) is None
    log.close()
    assert (tmp_path / "log").read_text() == ""  # a run without candidates: nothing to say
    assert final_record(run_dir, "exit code 1", "exit_code") == ("exit code 1", "host_oom")
    # A trainer killed by a signal keeps that cause (the classifier's host_oom is a guess).
    assert final_record(run_dir, "killed", "signal") == ("killed", "signal")
    # With candidates but none left, the log and status say why.
    (run_dir / FALLBACK).write_text(json.dumps({"candidates": CANDS[:1]}))
    log = (tmp_path / "log3").open("wb")
    assert fall_back(run_dir, {"train": {}}, ended, [ended], log) is None
    log.close()
    said = "host OOM at step 1 with b8 no-recompute; no OOM fallback: no candidate after 1 of 1"
    assert said in (tmp_path / "log3").read_text()
    assert said in (read_status(run_dir).model_extra or {})["fallback"]
    # A failure that is no OOM is left alone, and says nothing about a fallback.
    other = {"attempt": 1, "diagnosis_category": "nccl"}
    (run_dir / "attempts.json").write_text(json.dumps([other]))
    assert fall_back(run_dir, {"train": {}}, other, [other], (tmp_path / "l2").open("wb")) is None
    assert final_record(run_dir, "exit code 1", "exit_code") == ("exit code 1", "exit_code")


def test_probe_uses_the_one_classifier_for_oom() -> None:
    from backend.runs.probe import _out_of_memory

    assert _out_of_memory(f"step 1\n{CPU_ALLOC}\n")
    assert _out_of_memory("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB")
    assert _out_of_memory("    exitcode  : -9 (pid: 4242)")
    assert not _out_of_memory("ValueError: bad value\n")


@pytest.mark.parametrize("model", ["3.37b", "6.74b"])
def test_a_tuned_pick_falls_back_only_on_memory_knobs_with_real_savings(model: str) -> None:
    """tune's pick on an H200 (packed, Liger, fused AdamW): the chain never switches packing,
    kernels or optimizer, and each step saves >= the fit margin. At 6.74B the pick already
    recomputes (some layers, or all) with one 8192-token row per step: the only fallback that
    keeps the batch is recompute of every layer (a smaller row would change the tokens per
    step)."""
    from backend.planner.fallback import chain_from_ranked, memory_knobs_only
    from backend.planner.gpu import gpu_spec
    from backend.planner.memory import FIT_MARGIN
    from backend.planner.tune import tune

    base = load_preset(ROOT / "tests" / "fixtures" / "perf" / "7b-base.yaml")
    from backend.planner.perfrows import row_shape

    shape = row_shape({"model": model})
    tuned = tune(base, gpu_spec("h200"), shape, host_ram=128 << 30).preset
    again = tune(tuned, gpu_spec("h200"), shape, host_ram=128 << 30)
    chain = chain_from_ranked(tuned, again.ranked, again.before)
    launched = settings_from_preset(tuned)
    assert tuned.training.packing
    if model == "6.74b":
        # the pick recomputes (some layers or all) with one row per step; the one step left
        # is recompute of every layer (a smaller row would change the tokens per step)
        assert launched.checkpointing and launched.grad_accum == 1
        assert all(settings_from_preset(c.preset).trainer_gc for c in chain[1:])
        assert len(chain) == (1 if launched.trainer_gc else 2)
    else:
        assert len(chain) >= 2
    for prev, cand in itertools.pairwise(chain):
        assert cand.predicted_gpu_gib <= (1 - FIT_MARGIN) * prev.predicted_gpu_gib + 1e-3
        assert memory_knobs_only(launched, settings_from_preset(cand.preset))
        assert not {"training.packing", "training.use_liger_kernel", "training.optim"} & set(
            cand.overrides
        )
    padded = launched.with_(packing=False, liger=False, optim="adamw_torch")
    assert not memory_knobs_only(launched, padded)
    assert memory_knobs_only(launched, launched.with_(micro_batch=2, trainer_gc=True))
    assert memory_knobs_only(launched, launched.with_(recompute_layers=8))
    assert not memory_knobs_only(
        launched, launched.with_(compile_layers=not launched.compile_layers)
    )
