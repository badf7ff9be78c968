"""Diagnosis in Chinese (docs/i18n.md): the cause of a real CUDA OOM line, with the figures taken
from the log, its title and its fixes read in the user's language (the preset fields they change
stay as typed), in Troubleshoot and `trainwiz diagnose --lang zh`; English stays the default and
`--json` stays English."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.cells import cell_len

from backend.diagnosis import diagnose_text
from backend.i18n import set_language

ROOT = Path(__file__).resolve().parents[2]
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 39.39 GiB of which 1.12 GiB is free.\n"
)


@pytest.fixture
def chinese() -> Iterator[None]:
    set_language("zh_CN")
    yield
    set_language("en")


def _oom_explanation() -> str:
    found = [f for f in diagnose_text(OOM).findings if f.category == "cuda_oom"]
    assert found, "the OOM line is not classified as cuda_oom"
    return found[0].explanation


def test_oom_explanation_in_chinese_keeps_the_figures(chinese: None) -> None:
    text = _oom_explanation()
    assert text.startswith("GPU 显存不足"), text
    assert "2.00 GiB" in text and "39.4 GiB" in text, text


def test_oom_explanation_in_english_by_default() -> None:
    text = _oom_explanation()
    assert text.startswith("A GPU ran out of memory"), text
    assert "It asked for 2.00 GiB more on a 39.4 GiB GPU." in text, text


def test_oom_title_and_fixes_in_chinese_keep_fields_and_figures(chinese: None) -> None:
    from backend.preset import load_preset

    found = diagnose_text(OOM, preset=load_preset("vicuna-7b-4xa100-40g")).findings[0]
    assert found.title == "CUDA 显存不足（OOM）", found.title
    titles = [fix.title for fix in found.fixes]
    assert "单卡 batch 2 -> 1，梯度累积 16 -> 32" in titles, titles
    batch = next(f for f in found.fixes if f.title.startswith("单卡 batch"))
    assert [c.path for c in batch.changes] == [
        "training.per_device_train_batch_size",
        "training.gradient_accumulation_steps",
    ]  # the fields people type stay as they are
    assert "全局 batch 仍为 128 条序列" in batch.reason, batch.reason


def _diagnose_cli(*args: str) -> subprocess.CompletedProcess[str]:
    log = ROOT / "tests/fixtures/logcorpus/cuda_oom/fastchat-1781-vicuna7b-a100-40g.log"
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", str(log), *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip


def test_diagnose_cli_in_chinese_and_its_json_in_english() -> None:
    out = _diagnose_cli("--lang", "zh", "--preset", "vicuna-7b-4xa100-40g").stdout
    assert "错误    cuda_oom  第 1 行" in out, out  # severity padded to 7 cells, as in English
    assert "CUDA 显存不足（OOM）" in out and "修复 1：" in out, out
    assert "training.per_device_train_batch_size: 1  # 激活显存更少" in out, out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  GPU 显存不足"))
    explanation = lines[start : next(i for i, x in enumerate(lines) if x.startswith("  修复 1"))]
    # wrapped at 96 cells (CJK is two wide; a full stop may hang past it), indented by 2
    assert len(explanation) == 2 and all(cell_len(line) <= 100 for line in explanation), lines
    assert not any(line.lstrip().startswith(("。", "，")) for line in explanation), lines
    payload = json.loads(_diagnose_cli("--lang", "zh", "--json").stdout)
    assert payload["findings"][0]["title"] == "CUDA out of memory"
    assert payload["findings"][0]["fixes"][0]["title"] == "Let the allocator expand segments"
