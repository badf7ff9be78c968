"""An empty path (an unset shell variable: ``--to "$OUT"``) is refused, never read as a default.

``export RUN --to ''`` wrote into the current folder and ``tune --write ''`` into
PRESET-tuned.yaml. Every path-taking option of every subcommand is found by walking the real
parser (as tests/cli/test_odd_arguments.py does), so a new one is checked too: given ``''`` (or
only spaces) it stops argparse with exit 2 and one line naming the flag, before any work.
"""

from __future__ import annotations

import argparse
import io
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from tests.run_records import make_ended_run
from tui.cli import build_parser, main

# How a path is named in `--help` (METAVAR, or the option's name in capitals).
PATH_WORDS = ("PATH", "FILE", "DIR", "REPORT")
VALID_POSITIONAL = {"preset": "tiny-cpu", "run": "last", "target": "tiny-cpu", "file": "@sample"}


def path_options() -> Iterator[tuple[list[str], list[str], str]]:
    """(command words, valid positionals, option) for every option that takes a path."""

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> Iterator[tuple]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    yield from walk(child, [*words, name])
        if words and parser.get_default("func") is None:
            return  # a command group: its actions are its subcommands
        positionals = [
            VALID_POSITIONAL.get(a.dest, "x")
            for a in parser._actions
            if words and not a.option_strings and a.nargs not in ("?", "*")
            and not isinstance(a, argparse._SubParsersAction)
        ]  # fmt: skip
        for action in parser._actions:
            shown = action.metavar or action.dest.upper()
            if action.option_strings and action.nargs != 0 and any(w in shown for w in PATH_WORDS):
                yield words, positionals, action.option_strings[-1]

    yield from walk(build_parser(), [])


OPTIONS = list(path_options())


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRAINWIZ_LANG", "en")
    monkeypatch.setenv("TRAINWIZ_NO_NETWORK", "1")
    monkeypatch.chdir(tmp_path)


def test_the_walk_finds_the_path_options() -> None:
    found = {(" ".join(words), option) for words, _pos, option in OPTIONS}
    assert {
        ("", "--preset"),  # the wizard's
        ("export", "--to"),
        ("tune", "--write"),
        ("tune", "--config"),
        ("plan", "--lengths"),
        ("check", "--preset"),
        ("diagnose", "--preset"),
        ("model fetch", "--dir"),
        ("data check", "--model"),
        ("data check", "--python"),
    } <= found, found


def test_an_empty_data_file_is_refused_naming_it() -> None:
    code, _out, err = cli("data", "check", "")
    assert code == 2 and "FILE" in err and "empty" in err, err


@pytest.mark.parametrize("value", ["", "  "], ids=["empty", "spaces"])
@pytest.mark.parametrize(
    ("words", "positionals", "option"),
    OPTIONS,
    ids=[f"{' '.join(w)} {o}" for w, _p, o in OPTIONS],
)
def test_an_empty_path_option_is_refused_naming_the_flag(
    words: list[str], positionals: list[str], option: str, value: str
) -> None:
    code, out, err = cli(*words, *positionals, option, value)
    assert code == 2, (out, err)
    said = err.strip().splitlines()
    assert len(said) == 1 and option in said[0] and "empty" in said[0], said
    assert not out


def test_export_to_an_empty_path_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_ended_run(tmp_path / "home", "finished", 1, preset="p", log="ok\n")
    work = tmp_path / "work"  # an empty current folder: '' would have been it
    work.mkdir()
    monkeypatch.chdir(work)
    code, _out, err = cli("export", "last", "--to", "")
    assert code == 2 and "--to" in err and "empty" in err, err
    assert not list(work.iterdir())


def test_tune_write_to_an_empty_path_writes_nothing(tmp_path: Path) -> None:
    argv = ["tune", "vicuna-7b-lora-1x24g", "--gpu", "a100", "--no-probe", "--write", ""]
    code, _out, err = cli(*argv)
    assert code == 2 and "--write" in err, err
    assert not list(tmp_path.glob("*.yaml"))


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", ""],
        ["launch", " "],
        ["env", "tag", ""],
        ["model", "fetch", ""],
        ["replay", ""],
    ],
    ids=lambda argv: " ".join(a for a in argv if a.strip()),
)
def test_an_empty_preset_or_file_is_named_as_empty(argv: list[str]) -> None:
    """``Path('')`` is the current folder: "'.': is a directory" named the wrong thing."""
    code, out, err = cli(*argv)
    assert code == 2, (out, err)
    said = err.strip().splitlines()
    assert len(said) == 1 and "empty" in said[0] and "is a directory" not in said[0], said
