"""Every subcommand, every positional and every option, with hostile values: exit 0, 1 or 2
and at most a few lines on stderr, never a traceback.

The commands are found by walking the real parser (a new subcommand is tried automatically).
Values: empty, very long, odd bytes (surrogate-escaped, as Python decodes them from argv),
nan/inf/huge numbers, /proc and /dev files, a directory. In-process (fast) with an alarm per
call; a few cases that need a real process (closed stdout, /dev/full) run the console entry.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import FrameType

import pytest

from tui.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
TRAINWIZ = [sys.executable, "-c", "from tui.cli import entry; entry()"]
ODD = {
    "empty": "",
    "long": "a" * 6000,
    "bytes": "caf\udce9\udcff-\udcfe",
    "nan": "nan",
    "inf": "inf",
    "huge": "1e309",
    "negative": "-1",
    "proc_mem": "/proc/self/mem",
    "dev_zero": "/dev/zero",
    "root": "/",
    "dotdot": "../../etc",
    "space_url": "https://mirror example.com/a b",
}
# The wizard itself and commands whose whole point is to run for long: given a valid preset
# they would start work, so they get odd *options* only with an odd positional.
VALID_PRESET = {"plan", "tune"}
# Commands that build something real from a plain name: there a numeric-shaped value is just a
# folder name like "bytes" or "space_url" (each build is a real tiny model, ~6 CPU-s), so the
# positional gets the odd values that are not numbers; their options still get every value.
BUILDS = {("model", "make-tiny")}
NUMBER_SHAPED = {"nan", "inf", "huge", "negative"}


def leaf_commands() -> Iterator[tuple[list[str], list[str], list[str]]]:
    def walk(
        parser: argparse.ArgumentParser, path: list[str]
    ) -> Iterator[tuple[list[str], list[str], list[str]]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if path and parser.get_default("func") is not None:
            pos = [a.dest for a in parser._actions if not a.option_strings]
            pos = [p for p in pos if p not in ("command", "images_command")]
            opts = [
                a.option_strings[-1]
                for a in parser._actions
                if a.option_strings
                and a.nargs != 0
                and a.dest not in ("help", "lang")
                and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
            ]
            yield path, pos, opts
        for sub in subs:
            for name, child in sub.choices.items():
                yield from walk(child, [*path, name])

    yield from walk(build_parser(), [])


def cases() -> Iterator[list[str]]:
    for path, positionals, options in leaf_commands():
        for kind, value in ODD.items():
            if positionals and not (tuple(path) in BUILDS and kind in NUMBER_SHAPED):
                yield [*path, *([value] * len(positionals))]
            base = ["tiny-cpu"] if path[0] in VALID_PRESET else [value] * len(positionals)
            for option in options:
                if not positionals and path[0] == "check" and option != "--preset":
                    continue  # a full system check per value: covered by --preset
                yield [*path, *base, option, value]


CASES = list(cases())


class _Timeout(Exception):
    pass


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise _Timeout


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(30)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code: object = main(argv)
            except SystemExit as exc:  # argparse's own errors
                code = exc.code
    except _Timeout:
        code = "timeout"
    except Exception as exc:  # what reached the top: a traceback for the user
        code = f"Traceback: {type(exc).__name__}: {str(exc)[:200]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return (code if isinstance(code, int) else -1), err.getvalue() + (
        "" if isinstance(code, int) else f"not an exit code: {code!r}"
    )


def test_every_subcommand_is_tried() -> None:
    names = {tuple(p) for p, _pos, _opts in leaf_commands()}
    assert {("plan",), ("stop",), ("model", "fetch"), ("images",), ("export",)} <= names
    assert len(CASES) > 300


@pytest.mark.slow
def test_odd_arguments_never_give_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # make-tiny '' and friends: nothing lands in the checkout
    monkeypatch.setenv("TRAINWIZ_NO_NETWORK", "1")
    stdin = os.open(os.devnull, os.O_RDONLY)
    monkeypatch.setattr(sys, "stdin", os.fdopen(stdin))
    bad = []
    for argv in CASES:
        code, err = _run(argv)
        lines = [line for line in err.splitlines() if line.strip()]
        shown = [a[:30] for a in argv]
        if code not in (0, 1, 2) or "Traceback" in err or "Error:" in err.split(":", 1)[0]:
            bad.append(f"{shown}: exit {code}: {err[-300:]}")
        elif code in (1, 2) and len(lines) > 1:  # a refusal or a failure: one line at most
            bad.append(f"{shown}: exit {code} with {len(lines)} lines on stderr: {lines[:3]}")
        elif len(lines) > 40:  # a success may report progress, never pages of it
            bad.append(f"{shown}: {len(lines)} lines on stderr")
    assert not bad, "\n".join(bad[:20]) + f"\n({len(bad)} of {len(CASES)})"


@pytest.mark.parametrize("argv", [["runs"], ["presets"], ["plan", "tiny-cpu"], ["runs", "--json"]])
def test_closed_stdout_and_a_full_disk_are_one_line_exit_1(argv: list[str]) -> None:
    closed = subprocess.run(
        [*TRAINWIZ, *argv], cwd=ROOT, capture_output=False, stdout=None, stderr=subprocess.PIPE,
        text=True, timeout=60, check=False, close_fds=True, preexec_fn=lambda: os.close(1),
    )  # fmt: skip
    assert closed.returncode == 1 and "Traceback" not in closed.stderr, closed.stderr
    assert len(closed.stderr.strip().splitlines()) == 1
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*TRAINWIZ, *argv], cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True,
            timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "No space left on device" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
