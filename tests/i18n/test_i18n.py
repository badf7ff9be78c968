"""Languages: how one is chosen, that the catalogs are complete, and that people get Chinese
where they asked for it while scripts keep English JSON."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from backend.errors import BadInput
from backend.i18n import _, available_languages, resolve_language, set_language

ROOT = Path(__file__).resolve().parents[2]


def _catalog_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tw_i18n", ROOT / "scripts" / "i18n.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("cli", "env", "expected"),
    [
        ("zh", {"TRAINWIZ_LANG": "en", "LANG": "en_US.UTF-8"}, "zh_CN"),
        (None, {"TRAINWIZ_LANG": "zh", "LANG": "en_US.UTF-8"}, "zh_CN"),
        (None, {"LANG": "zh_CN.UTF-8"}, "zh_CN"),
        (None, {"LC_ALL": "C", "LANG": "zh_CN.UTF-8"}, "en"),
        (None, {"LANG": "de_DE.UTF-8"}, "en"),
        (None, {"LANGUAGE": "fr:zh_CN"}, "zh_CN"),
        (None, {}, "en"),
        ("zh-CN", {}, "zh_CN"),
    ],
)
def test_language_precedence(cli: str | None, env: dict[str, str], expected: str) -> None:
    assert resolve_language(cli, env) == expected


@pytest.mark.parametrize(
    ("cli", "env", "source"),
    [("xx", {}, "--lang"), (None, {"TRAINWIZ_LANG": "klingon"}, "TRAINWIZ_LANG")],
)
def test_a_language_asked_for_and_unsupported_names_where_it_came_from(
    cli: str | None, env: dict[str, str], source: str
) -> None:
    with pytest.raises(BadInput, match=source):
        resolve_language(cli, env)


def test_zh_catalog_is_compiled_and_translates() -> None:
    assert "zh_CN" in available_languages()
    try:
        set_language("zh_CN")
        assert _("fail") == "失败"
        assert _("a message nobody translated") == "a message nobody translated"
    finally:
        set_language("en")
    assert _("fail") == "fail"


def test_catalogs_have_no_missing_stale_or_broken_entry() -> None:
    """What CI gates on: every marked string translated, nothing stale, .mo up to date."""
    assert _catalog_tool().problems() == []


def test_catalog_check_catches_a_missing_translation_and_a_stale_mo(tmp_path: Path) -> None:
    tool = _catalog_tool()
    (tmp_path / "backend").mkdir()
    shutil.copytree(ROOT / "backend" / "locale", tmp_path / "backend" / "locale")
    (tmp_path / "backend" / "new.py").write_text(
        "from backend.i18n import _\nMSG = _('a brand new message')\nX = _('x {a}')\n"
    )
    found = tool.problems(tmp_path)
    assert any("missing: 'a brand new message'" in line for line in found)
    po = tmp_path / "backend" / "locale" / "zh_CN" / "LC_MESSAGES" / "trainwiz.po"
    po.write_text(
        po.read_text(encoding="utf-8") + '\nmsgid "x {a}"\nmsgstr "y {b}"\n', encoding="utf-8"
    )
    found = tool.problems(tmp_path)
    assert any("placeholders differ" in line for line in found)
    assert any("not compiled from it" in line for line in found)


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "check", "--only", "git_lfs", "--only", "shm", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/nonexistent", "LANG": "C.UTF-8", "COLUMNS": "200"},
    )


def test_check_in_chinese_explains_in_chinese() -> None:
    """No git-lfs on this PATH: the warning's why and fix come in Chinese."""
    proc = _check("--lang", "zh")
    assert "状态" in proc.stdout
    assert "原因：没有 git-lfs" in proc.stdout
    assert "修复：" in proc.stdout


def test_json_stays_english_whatever_the_language() -> None:
    proc = _check("--lang", "zh", "--json")
    payload = json.loads(proc.stdout)
    lfs = next(c for c in payload["checks"] if c["id"] == "git_lfs")
    assert lfs["why"].startswith("Without git-lfs")


def test_unsupported_lang_flag_exits_2_naming_it() -> None:
    proc = _check("--lang", "xx")
    assert proc.returncode == 2
    assert "--lang 'xx': unsupported language" in proc.stderr
