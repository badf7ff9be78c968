"""Check titles and summaries in Chinese (docs/i18n.md): `trainwiz check --lang zh` names each
check and says what it found in Chinese, with the figures and the ids (what --only takes)
untouched; the wizard's check list keeps its columns in line although CJK is two cells wide."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.cells import cell_len

from backend.checks import CheckResult
from backend.i18n import set_language
from widgets.check_list import row_text

ROOT = Path(__file__).resolve().parents[2]


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "check", "--only", "git_lfs", "--only", "memlock",
         "--only", "shm", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/nonexistent", "LANG": "C.UTF-8", "COLUMNS": "200"},
    )  # fmt: skip


def test_check_table_in_chinese_has_titles_summaries_and_ids() -> None:
    out = _check("--lang", "zh").stdout
    assert "memlock 限制" in out and "memlock 软限制" in out, out  # title and summary
    assert "未找到 git-lfs" in out, out  # no git-lfs on this PATH: the summary in Chinese
    assert "git_lfs" in out and "memlock" in out, out  # the ids stay as typed
    assert "not found" not in out and "memlock soft" not in out, out


def test_check_json_summaries_stay_english() -> None:
    payload = json.loads(_check("--lang", "zh", "--json").stdout)
    by_id = {c["id"]: c for c in payload["checks"]}
    assert by_id["git_lfs"]["summary"] == "git-lfs not found"
    assert by_id["memlock"]["title"] == "memlock limit"
    assert by_id["memlock"]["summary"].startswith("memlock soft ")


@pytest.fixture
def chinese() -> Iterator[None]:
    set_language("zh_CN")
    yield
    set_language("en")


def test_check_list_row_pads_by_cells_not_characters(chinese: None) -> None:
    """'磁盘空间' is 4 characters but 8 cells: the summary starts in the same column as an
    ASCII title's would."""
    result = CheckResult(id="disk", status="ok", summary="enough disk for this preset")
    row = row_text("Disk space", result).plain
    assert row.startswith("✓ 磁盘空间"), row
    summary = "磁盘空间足够此预设使用"
    assert row.endswith(summary), row  # a recorded English summary: shown translated
    assert cell_len(row[: row.index(summary)]) == 2 + 25


def test_preset_errors_in_chinese_keep_field_path_and_position(tmp_path: Path) -> None:
    """A bad preset: exit 2, every problem in Chinese, ``file:line:col`` and the field path as
    the user wrote them (what they search their file for)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "schema: 1\nname: bad\ntraining:\n  lerning_rate: 2e-5\n  per_device_train_batch_size: 0\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "plan", str(bad), "--lang", "zh"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert (
        f"{bad}:4:3 training.lerning_rate: 未知的键 'lerning_rate'；是不是想写 'learning_rate'？"
        in err
    )
    assert f"{bad}:1:1 model: 缺少必需的键 'model'" in err, err
    assert f"{bad}:5:32 training.per_device_train_batch_size: 应大于或等于 1（实际为 0）" in err


def test_help_in_chinese_from_the_flag_or_the_locale() -> None:
    """--help comes before the real parse: the language is looked up from argv and the locale."""
    by_flag = _check("--lang", "zh", "--help").stdout
    assert "只运行这些检查：nvidia_driver" in by_flag, by_flag
    by_locale = subprocess.run(
        [sys.executable, "-m", "tui.cli", "check", "--help"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "LANG": "zh_CN.UTF-8", "COLUMNS": "200"},
    ).stdout  # fmt: skip
    assert "输出机器可读的 JSON" in by_locale, by_locale
    assert "print machine-readable JSON" in _check("--help").stdout
