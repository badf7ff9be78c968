"""hub_auth, cuda_arch and loss_nan: the lines, the run's metrics.jsonl, fixes as preset changes,
the live log pane's flags, and the prefilter's promise never to hide a line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend.diagnosis import Fix, apply_fixes, classify_line, diagnose_file, diagnose_text
from backend.diagnosis.scan import _anchors, effective_anchors, key_index, scan_key
from backend.monitor.logfollow import LogBatch
from backend.monitor.logmodel import classify_batch, load_classifier
from backend.preset.loader import load_preset
from backend.preset.schema import Preset

REPO = Path(__file__).resolve().parents[2]
CORPUS2 = REPO / "tests" / "fixtures" / "logcorpus2"


@pytest.fixture()
def vicuna() -> Preset:
    return load_preset("vicuna-7b-4xa100-40g")


def _changes(fix: Fix) -> dict[str, object]:
    return {c.path: c.value for c in fix.changes}


@pytest.mark.parametrize(
    ("line", "category"),
    [
        ("OSError: You are trying to access a gated repo.", "hub_auth"),
        ("huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: Please enable access to public "
         "gated repositories in your fine-grained token settings to view them.", "hub_auth"),
        ("Found GPU0 Tesla K80 which is of cuda capability 3.7. PyTorch no longer supports this GPU "
         "because it is too old.", "cuda_arch"),
        ("ptxas fatal   : Value 'sm_120' is not defined for option 'gpu-name'", "cuda_arch"),
        ("ValueError: bf16 mixed precision requires PyTorch >= 1.10 and a supported device.",
         "cuda_arch"),
        ("Loss is nan, stopping training", "loss_nan"),
        ("RuntimeError: Function 'MulBackward0' returned nan values in its 0th output.", "loss_nan"),
        ("/bin/bash: line 1:  4321 Killed                  python train.py", "host_oom"),
        ("zsh: killed     python train.py", "host_oom"),
        ("[  123.4] python invoked oom-killer: gfp_mask=0x100cca, order=0", "host_oom"),
        ("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=123.0.", "host_oom"),
        ("RuntimeError: unable to write to file </torch_3421_1803931536_4>: No space left on device "
         "(28)", "shm"),
    ],
)  # fmt: skip
def test_other_wordings_of_the_same_mechanisms(line: str, category: str) -> None:
    """Messages of the same components that no corpus log holds (written from their sources)."""
    flag = classify_line(line)
    assert flag is not None and flag.category == category and flag.severity == "error"


@pytest.mark.parametrize(
    ("line", "category", "severity"),
    [
        # the trainwiz entry's own message when it stops a run
        ("[trainwiz] non-finite loss (nan) at step 12: stopping the run", "loss_nan", "error"),
        ("Non-finite loss at step 3", "loss_nan", "error"),
        ("{'loss': nan, 'grad_norm': nan, 'learning_rate': 2e-05, 'epoch': 0.1}", "loss_nan", "error"),
        ("{'loss': inf, 'learning_rate': 2e-05, 'epoch': 0.1}", "loss_nan", "error"),
        ("{'loss': 1.2, 'grad_norm': nan, 'learning_rate': 2e-05}", "loss_nan", "warning"),
        ('{"kind": "step", "step": 4, "loss": NaN, "learning_rate": 1e-05}', "loss_nan", "error"),
        ('{"kind": "step", "step": 4, "loss": null, "learning_rate": 1e-05, "grad_norm": null}',
         "loss_nan", "error"),
        ("huggingface_hub.errors.GatedRepoError: 403 Client Error.", "hub_auth", "error"),
        ("Access to model meta-llama/Llama-2-7b-hf is restricted and you are not in the authorized"
         " list. Visit https://huggingface.co/meta-llama/Llama-2-7b-hf to ask for access.",
         "hub_auth", "error"),
        ("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the "
         "device", "cuda_arch", "error"),
        ("ValueError: Bf16 training requires an Ampere or newer GPU (compute capability 8.0)",
         "cuda_arch", "error"),
    ],
)  # fmt: skip
def test_lines_of_the_new_categories(line: str, category: str, severity: str) -> None:
    flag = classify_line(line)
    assert flag is not None and (flag.category, flag.severity) == (category, severity)
    top = diagnose_text(line + "\n").top
    assert top is not None and (top.category, top.severity) == (category, severity)


@pytest.mark.parametrize(
    "line",
    [
        '{"kind": "step", "step": 3, "loss": null, "learning_rate": null, "grad_norm": null}',
        "{'loss': 0.0, 'grad_norm': 0.0, 'learning_rate': 2.6e-08, 'epoch': 0.0}",
        "[INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step.",
        "Some weights of LlamaForCausalLM were not initialized from the model checkpoint",
        "Loading checkpoint shards: 100%|██████████| 2/2 [00:03<00:00,  1.60s/it]",
        "[2024-06-26 19:51:15,295] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend",
    ],
)
def test_healthy_lines_raise_nothing(line: str) -> None:
    assert classify_line(line) is None


def test_repeated_nan_gradient_norm_is_an_error() -> None:
    log = "".join(f"{{'loss': 7.1, 'grad_norm': nan, 'epoch': {i}}}\n" for i in range(3))
    top = diagnose_text(log).top
    assert top is not None and top.category == "loss_nan" and top.severity == "error"


def _run(home: Path, log: str, metrics: str) -> Path:
    run = home / "runs" / "20261201-100000-nan"
    run.mkdir(parents=True)
    (run / "train.log").write_text(log, encoding="utf-8")
    (run / "metrics.jsonl").write_text(metrics, encoding="utf-8")
    shutil.copy(REPO / "presets" / "vicuna-7b-4xa100-40g.yaml", run / "preset.yaml")
    return run


@pytest.mark.parametrize(
    "bad_step",
    [
        '{"kind": "step", "step": 2, "loss": NaN, "learning_rate": 2e-05, "grad_norm": NaN}\n',
        '{"kind": "step", "step": 2, "loss": null, "learning_rate": 2e-05, "grad_norm": null}\n',
    ],
    ids=["bare-NaN", "null"],
)
def test_a_runs_metrics_jsonl_gives_loss_nan_through_the_cli(tmp_path: Path, bad_step: str) -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])
    good = '{"kind": "step", "step": 1, "loss": 1.25, "learning_rate": 2e-05, "grad_norm": 0.8}\n'
    run = _run(home, "{'train_runtime': 12.0, 'train_loss': 1.1}\n", good + bad_step)
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", run.name, "--json"],
        capture_output=True, text=True, cwd=REPO, env=dict(os.environ), timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    top = json.loads(proc.stdout)["findings"][0]
    assert top["category"] == "loss_nan" and top["line"] == 2
    assert top["text"].startswith("metrics.jsonl line 2:")
    paths = {c["path"] for f in top["fixes"] for c in f["changes"]}
    assert "training.learning_rate" in paths


def test_metrics_without_nan_add_nothing(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        "{'loss': 1.0, 'learning_rate': 2e-05}\n",
        '{"kind": "step", "step": 1, "loss": 1.0, "learning_rate": 2e-05}\n'
        '{"kind": "step", "step": 2, "loss": null, "learning_rate": null}\n',
    )
    assert diagnose_file(run / "train.log").findings == []


def test_hub_fixes_name_the_presets_token_variable_repo_and_mirror(vicuna: Preset) -> None:
    mirrored = vicuna.model_copy(
        update={
            "model": vicuna.model.model_copy(
                update={"endpoint": "https://hf-mirror.com", "token_env": "MY_HF_TOKEN"}
            )
        }
    )
    log = CORPUS2 / "hub_auth/hf-download-accelerator-39-not-in-authorized-list.log"
    top = diagnose_file(log, preset=mirrored).top
    assert top is not None and top.category == "hub_auth"
    titles = [f.title for f in top.fixes]
    assert any("MY_HF_TOKEN" in t for t in titles)
    assert any("huggingface.co/meta-llama/Meta-Llama-3-8B" in t for t in titles)
    mirror_fix = next(f for f in top.fixes if "model.endpoint" in _changes(f))
    assert apply_fixes(mirrored, mirror_fix).model.endpoint is None


def test_arch_fix_picks_an_image_built_for_sm_120(vicuna: Preset) -> None:
    top = diagnose_file(CORPUS2 / "cuda_arch/leggedlab-26-rtx5090-sm120.log", preset=vicuna).top
    assert top is not None and top.category == "cuda_arch"
    image = _changes(top.fixes[0])["environment.image"]
    # the first CUDA that compiles for Blackwell consumer GPUs, so the driver needs the least
    assert isinstance(image, str) and "-cuda12.8-" in image and image.endswith("-devel")
    assert apply_fixes(vicuna, top.fixes[0]).environment.image == image


def test_bf16_on_v100_turns_into_fp16_and_sdpa(vicuna: Preset) -> None:
    top = diagnose_file(
        CORPUS2 / "cuda_arch/fastchat-399-v100-bf16-setup-unsupported.log", preset=vicuna
    ).top
    assert top is not None and top.category == "cuda_arch"
    fixed = apply_fixes(vicuna, top.fixes[0])
    assert (fixed.training.bf16, fixed.training.fp16) == (False, True)
    sdpa = apply_fixes(vicuna, top.fixes[1])
    assert sdpa.training.attn_implementation == "sdpa"
    assert sdpa.environment.flash_attn.install == "never"


def test_loss_scale_minimum_proposes_lower_lr_and_bf16(vicuna: Preset) -> None:
    fp16 = vicuna.model_copy(
        update={"training": vicuna.training.model_copy(update={"bf16": False, "fp16": True})}
    )
    log = CORPUS2 / "loss_nan/deepspeedexamples-418-loss-scale-at-minimum.log"
    top = diagnose_file(log, preset=fp16).top
    assert top is not None and top.category == "loss_nan"
    lr = apply_fixes(fp16, top.fixes[0]).training.learning_rate
    assert lr == pytest.approx(fp16.training.learning_rate / 4)
    bf16 = apply_fixes(fp16, next(f for f in top.fixes if "training.bf16" in _changes(f)))
    assert (bf16.training.bf16, bf16.training.fp16) == (True, False)


def test_log_pane_flags_the_new_categories_through_the_shared_classifier() -> None:
    lines = [
        "{'loss': nan, 'learning_rate': 2e-05}",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "huggingface_hub.errors.GatedRepoError: 401 Client Error.",
        "{'loss': 1.0, 'learning_rate': 2e-05}",
    ]
    batch = classify_batch(LogBatch(lines, [1, 2, 3, 4]), load_classifier())
    assert [line.flag.category if line.flag else None for line in batch.lines] == [
        "loss_nan", "cuda_arch", "hub_auth", None,
    ]  # fmt: skip


def test_every_scan_key_is_part_of_its_anchor_so_the_prefilter_hides_nothing() -> None:
    for anchor in _anchors():
        assert scan_key(anchor) in anchor
    keys, sigs, marks = key_index()
    sig_anchors, marker_anchors = effective_anchors()  # hand-written and derived (regex_cover)
    for index, anchors in enumerate(sig_anchors):
        for anchor in anchors:
            assert any(index in sigs[n] for n, key in enumerate(keys) if key in anchor)
    for index, anchors in enumerate(marker_anchors):
        for anchor in anchors:
            assert any(index in marks[n] for n, key in enumerate(keys) if key in anchor)
