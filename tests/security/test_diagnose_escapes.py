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


BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"  # embeddings, overrides, isolates
BIDI_LOGS = {
    "oom": f"torch.OutOfMemoryError: CUDA out of{BIDI[4]} memory. Tried to allocate 2.00 GiB\n",
    "nccl": f"NCCL error {BIDI}: unhandled system error\nncclSystemError{BIDI[4]}\n",
    "traceback": (
        "Traceback (most recent call last):\n"
        f'  File "/x/{BIDI[4]}evil.py", line 3, in <module>\n'
        f"RuntimeError: boom {BIDI[4]}{BIDI[5]} reversed{BIDI[8]} text\n"
    ),
    "unknown": f"hello {BIDI[4]}world\nerror: something {BIDI}bad\n",
}


@pytest.mark.parametrize("json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize("kind", sorted(BIDI_LOGS))
def test_diagnose_shows_no_bidi_control_from_the_log_or_its_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, json: bool
) -> None:
    """U+202E and friends show text in another order than it is stored ("Trojan Source"):
    whatever diagnose quotes (a finding's line, the log's own name) reaches the terminal
    without them, in the text report and in --json (escaped by the JSON encoder)."""
    log = tmp_path / f"ev{BIDI[4]}il.log"
    log.write_text(BIDI_LOGS[kind])
    code = main(["diagnose", str(log), *(["--json"] if json else [])])
    out, err = capsys.readouterr()
    assert code in (0, 1), err
    assert not set(BIDI) & set(out + err), (out + err)[-600:]
    assert "Traceback" not in err
