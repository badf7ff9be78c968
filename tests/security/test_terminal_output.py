"""What the CLI prints from a file, a run record or an argument reaches the terminal with no
escape sequence, no C0/C1 control character (newlines and tabs aside) and no bidi override.

A train.log is written by the trainer and whatever the preset ran; status.json and preset.yaml
by a run; an argument by whoever typed or scripted it. Printed raw, an OSC sequence retitles the
window or writes the clipboard (OSC 52), ``ESC[2J`` clears the screen, a C1 CSI (``\\x9b``) does
what ``ESC[`` does, and U+202E makes the terminal show text in another order than it is. Every
test looks at the bytes the child process wrote, as the terminal would receive them.

Also the exit codes of the same commands: 0/1/2 (docs/security.md), for `replay` too, and a
TRAINWIZ_HOME that is not a directory is bad input, not "no runs yet".
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from backend.rundir import read_status, write_status
from backend.termsafe import terminal_safe
from tests.run_records import make_ended_run
from tests.trainwiz_cli import ROOT, cli_bytes

OSC_TITLE = "\x1b]0;PWNED\x07"
OSC_CLIPBOARD = "\x1b]52;c;ZWNobyBwd25lZA==\x1b\\"
CLEAR = "\x1b[2J\x1b[H"
C1 = "\x9b2J\x9d0;C1TITLE\x9c\x85"
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
HOSTILE = OSC_TITLE + OSC_CLIPBOARD + CLEAR + C1 + BIDI
ARGUMENT = "\x1b]0;PWN\x07\x1b[2J\u202e"


def assert_terminal_safe(raw: bytes) -> str:
    """``raw`` as text, failing on anything a terminal would act on rather than show."""
    assert b"\x1b" not in raw and b"\x07" not in raw and b"\r" not in raw, raw[-600:]
    assert all(byte >= 0x20 or byte in b"\t\n" for byte in raw) and b"\x7f" not in raw, raw[-600:]
    text = raw.decode("utf-8")  # a stray byte from the log is never passed through either
    assert not [ch for ch in text if 0x80 <= ord(ch) <= 0x9F], text[-600:]
    assert not set(BIDI) & set(text), text[-600:]
    return text


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "TRAINWIZ_HOME": str(tmp_path), "TRAINWIZ_LANG": "en"}


def hostile_run(tmp_path: Path, preset: str = "hostile") -> Path:
    """An ended run whose log, status message and preset carry every kind of sequence."""
    log = (
        "step 1\tloss 2.0\n"
        f"title{OSC_TITLE} clipboard{OSC_CLIPBOARD} clear{CLEAR} end\n"
        f"c1 {C1} bidi {BIDI}evil\n"
        " 10%|#  |\r 20%|## |\r\n"
    )
    run_dir = make_ended_run(tmp_path, "failed", None, preset=preset, log="")
    raw_bytes = (
        b"raw \x1b]0;RAWTITLE\x07 \x9b2J \xff\xfe\n"  # not UTF-8: as a broken trainer wrote it
    )
    (run_dir / "train.log").write_bytes(log.encode() + raw_bytes + b"done\n")
    status = read_status(run_dir)
    write_status(run_dir, status.model_copy(update={"message": f"exit 1{HOSTILE} failed"}))
    record = yaml.safe_load((run_dir / "preset.yaml").read_text())
    record["training"]["data_path"] = f"data{HOSTILE}.json"
    record["training"][f"key{OSC_TITLE}"] = 1  # a key is printed too, as the field's label
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(record))
    return run_dir


@pytest.mark.parametrize("follow", [False, True], ids=["logs", "logs-follow"])
def test_logs_print_no_sequence_from_train_log(
    tmp_path: Path, home: dict[str, str], follow: bool
) -> None:
    run_dir = hostile_run(tmp_path)
    done = cli_bytes("logs", run_dir.name, *(["--follow"] if follow else []), env=home)
    assert done.returncode == 0, done.stderr[-2000:]
    out = assert_terminal_safe(done.stdout)
    assert_terminal_safe(done.stderr)
    assert "step 1\tloss 2.0\n" in out  # tabs and newlines are the log's own layout
    assert "title clipboard clear end\n" in out and "done\n" in out
    assert "PWNED" not in out and "RAWTITLE" not in out and "ZWNob" not in out
    assert " 10%|#  |\n 20%|## |\n" in out  # a tqdm redraw is a line of its own, hiding nothing


def test_runs_list_prints_a_status_message_without_sequences(
    tmp_path: Path, home: dict[str, str]
) -> None:
    run_dir = hostile_run(tmp_path)
    done = cli_bytes("runs", env=home)
    assert done.returncode == 0, done.stderr[-2000:]
    out = assert_terminal_safe(done.stdout)
    assert run_dir.name in out and "PWNED" not in out
    assert "exit 1" in out and " failed" in out


def test_runs_compare_prints_preset_values_without_sequences(
    tmp_path: Path, home: dict[str, str]
) -> None:
    first = hostile_run(tmp_path, "first")
    second = make_ended_run(tmp_path, "finished", None, preset="second", log="ok\n")
    done = cli_bytes("runs", "compare", first.name, second.name, env=home)
    assert done.returncode == 0, done.stderr[-2000:]
    out = assert_terminal_safe(done.stdout)
    assert "training.data_path" in out and "training.key" in out
    assert "PWNED" not in out


@pytest.mark.parametrize(
    "words",
    [
        ("runs", "compare", "RUN", ARGUMENT),
        ("logs", ARGUMENT),
        ("stop", ARGUMENT),
        ("diagnose", ARGUMENT),
        ("plan", ARGUMENT),
        ("model", "validate", ARGUMENT),
        ("presets", ARGUMENT),  # argparse's own refusal: "unrecognized arguments: ..."
    ],
    ids=lambda words: "-".join(w for w in words if w not in (ARGUMENT, "RUN")),
)
def test_an_argument_in_an_error_is_shown_not_obeyed(
    tmp_path: Path, home: dict[str, str], words: tuple[str, ...]
) -> None:
    run_dir = make_ended_run(tmp_path, "finished", None, preset="only", log="ok\n")
    args = [run_dir.name if w == "RUN" else w for w in words]
    done = cli_bytes(*args, env=home)
    assert done.returncode == 2, done.stderr[-2000:]
    said = assert_terminal_safe(done.stderr).splitlines()
    assert len(said) == 1, said
    # shown as text, so the user sees what was given rather than an empty name
    assert "\\x1b]0;PWN\\x07\\x1b[2J\\u202e" in said[0], said


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (f"a{BIDI}b", "ab"),
        ("a\u200bb\u00e9\u4e2d", "a\u200bb\u00e9\u4e2d"),  # ordinary text, wide or not, stays
        ("a\r\nb\rc", "a\nb\nc"),
        ("a\x9d0;t\x9cb", "a\\x9d0;t\\x9cb"),
    ],
)
def test_terminal_safe_drops_bidi_controls_and_breaks_lines_at_cr(raw: str, shown: str) -> None:
    assert terminal_safe(raw) == shown


def test_terminal_safe_can_show_what_it_would_drop() -> None:
    """An argument in an error is shown escaped: ``run ''`` would hide what was typed."""
    assert terminal_safe(f"run '{ARGUMENT}'\r\n", show_sequences=True) == (
        "run '\\x1b]0;PWN\\x07\\x1b[2J\\u202e'\\x0d\n"
    )


def test_diagnose_quotes_a_log_line_without_bidi_overrides(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        f"torch.OutOfMemoryError: CUDA out of memory.{BIDI} Tried to allocate 2.00 GiB\n"
    )
    done = cli_bytes("diagnose", str(log), env={**os.environ, "TRAINWIZ_LANG": "en"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "CUDA out of memory" in assert_terminal_safe(done.stdout)


def test_replay_exits_1_naming_the_failed_stage(tmp_path: Path, home: dict[str, str]) -> None:
    """A failed stage is a failure (1); which stage is said in its line, not by the code."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["model"] = {"source": "local", "dir": str(tmp_path / "no-such-model")}
    preset = tmp_path / "missing-model.yaml"
    preset.write_text(yaml.safe_dump(data))
    done = cli_bytes("replay", str(preset), "--from", "model", "--until", "model", env=home)
    assert done.returncode == 1, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    said = assert_terminal_safe(done.stderr).splitlines()
    assert len(said) == 1, said
    assert said[0].startswith("trainwiz: error: replay failed at step model: "), said
    assert "no-such-model does not exist" in said[0]


def test_replay_refuses_a_bad_step_name_with_2(home: dict[str, str]) -> None:
    done = cli_bytes("replay", "tiny-cpu", "--from", "launch", "--until", "checks", env=home)
    assert done.returncode == 2, done.stderr[-2000:]


@pytest.mark.parametrize("json", [False, True], ids=["runs", "runs-json"])
def test_runs_with_a_home_that_is_not_a_directory_is_bad_input(json: bool) -> None:
    env = {**os.environ, "TRAINWIZ_HOME": "/dev/null", "TRAINWIZ_LANG": "en"}
    done = cli_bytes("runs", *(["--json"] if json else []), env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    said = assert_terminal_safe(done.stderr).splitlines()
    assert len(said) == 1 and "TRAINWIZ_HOME=/dev/null is not a directory" in said[0], said
    assert b"no runs yet" not in done.stdout + done.stderr


def test_a_run_under_a_home_that_is_a_file_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("")
    env = {**os.environ, "TRAINWIZ_HOME": str(tmp_path / "home"), "TRAINWIZ_LANG": "en"}
    done = cli_bytes("logs", "last", env=env)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert b"is not a directory" in done.stderr and b"no runs yet" not in done.stderr
