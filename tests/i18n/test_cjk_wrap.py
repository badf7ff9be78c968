"""Chinese wraps by character in Rich/Textual (tui/cjk_wrap.py), and English exactly as before:
every English message of the catalog breaks at the same places with the new word pattern as with
Rich's own, and a Chinese sentence after a Latin word no longer leaves that word alone."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import rich._wrap
from babel.messages.pofile import read_po
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from tui.cjk_wrap import WORD

ROOT = Path(__file__).resolve().parents[2]
RICH_WORD = re.compile(r"\s*\S+\s*")  # rich._wrap's own pattern


@pytest.fixture
def catalog() -> Iterator[list[tuple[str, str]]]:
    with (ROOT / "backend/locale/zh_CN/LC_MESSAGES/trainwiz.po").open("rb") as fh:
        yield [(str(m.id), str(m.string)) for m in read_po(fh) if m.id]


def test_english_breaks_where_rich_breaks(
    catalog: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for english, _zh in catalog:
        for width in (9, 24, 41, 80):
            monkeypatch.setattr(rich._wrap, "re_word", RICH_WORD)
            before = rich._wrap.divide_line(english, width)
            monkeypatch.setattr(rich._wrap, "re_word", WORD)
            assert rich._wrap.divide_line(english, width) == before, (english, width)


def test_chinese_fills_lines_and_keeps_marks_beside_their_character() -> None:
    import tui  # noqa: F401  (installs the pattern, as the wizard and the CLI do)

    assert rich._wrap.re_word is WORD
    console = Console(width=40, record=True, color_system=None)
    console.print(
        Text(
            "GPU 显存不足：一步训练的权重、梯度、优化器状态和激活值放不下。激活值随每设备批次 x "
            "序列长度增长。它还要申请 0.10 GiB，而 GPU 共 39.6 GiB。"
        )
    )
    lines = console.export_text().splitlines()
    assert lines[0].startswith("GPU 显存不足："), lines  # not "GPU" alone on its line
    assert all(cell_len(line) <= 40 for line in lines), lines
    assert not any(line.startswith(("，", "。", "：", "）")) for line in lines), lines
    assert len(lines) <= 4, lines


def test_ascii_brackets_stay_with_the_cjk_they_enclose() -> None:
    """The Launch plan's "(已就绪：跳过)" used to leave its ")" alone on the next line."""
    from rich.console import Console
    from rich.text import Text

    import tui  # noqa: F401 (installs the CJK word pattern)

    text = Text("1. [model] 在本地生成随机权重的 tiny Llama 及其 tokenizer  (已就绪：跳过)")
    console = Console(width=200)
    for width in range(40, 73):
        lines = [str(line) for line in text.wrap(console, width)]
        assert not any(line.startswith(")") for line in lines), (width, lines)
        assert not any(line.rstrip().endswith("(") for line in lines), (width, lines)
