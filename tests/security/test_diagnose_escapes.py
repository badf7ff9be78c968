"""`trainwiz diagnose` quotes log lines; escape sequences in them must not reach the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.termsafe import terminal_safe
from tui.cli import main

OSC_TITLE = "\x1b]0;PWNED\x07"
OSC_CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x1b\\"
CSI = "\x1b[2J\x1b[31m"


def test_diagnose_output_has_no_escape_sequences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "Traceback (most recent call last):\n"
        f"torch.OutOfMemoryError: CUDA out of memory.{OSC_TITLE} Tried to allocate"
        f" 2.00 GiB{OSC_CLIPBOARD}{CSI}\x08\x08\n"
    )
    assert main(["diagnose", str(log)]) == 1
    out = capsys.readouterr().out
    assert "cuda_oom" in out and "CUDA out of memory" in out
    assert "\x1b" not in out and "\x07" not in out and "\x08" not in out and "\x9b" not in out
    assert "PWNED" not in out  # the OSC payload is dropped with its sequence


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (f"a{OSC_TITLE}b", "ab"),
        (f"a{CSI}b", "ab"),
        ("a\x9b2Jb", "ab"),
        ("a\x00b\x7fc", "a\\x00b\\x7fc"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("a\x1b]0;unterminated", "a"),
    ],
)
def test_terminal_safe(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown
