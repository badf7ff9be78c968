"""Each subcommand imports its own command module only: `trainwiz stop`, `logs` and `attach`
(registered by the runs module) built the whole parser, every command module with the checks,
the planner and the image code, ~0.2 CPU-s more per call than `trainwiz runs`."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tui.cli import COMMAND_ALIASES, COMMAND_MODULES, OneLineParser, _command_in

REPO = Path(__file__).resolve().parents[2]


def test_every_registered_subcommand_finds_the_module_that_registers_it() -> None:
    for module in COMMAND_MODULES:
        parser = OneLineParser(prog="trainwiz")
        subparsers = parser.add_subparsers(dest="command")
        importlib.import_module(f"tui.commands.{module}").register(subparsers)
        for name in subparsers.choices:
            assert _command_in([name]) == module, (name, module)
    assert set(COMMAND_ALIASES.values()) <= set(COMMAND_MODULES)


@pytest.mark.parametrize("argv", [["stop", "no-such-run"], ["logs", "no-such-run"],
                                  ["attach", "no-such-run"], ["runs", "--json"]])  # fmt: skip
def test_a_runs_subcommand_imports_no_other_command_module(argv: list[str], tmp_path: Path) -> None:
    code = (
        "import sys; from tui.cli import main; rc = main(sys.argv[1:]); "
        "others = sorted(m for m in sys.modules if m.startswith('tui.commands.') and m not in "
        "('tui.commands._args', 'tui.commands._common', 'tui.commands.runs', "
        "'tui.commands.compare') or m.startswith(('backend.checks', 'backend.planner.tune'))); "
        "print('OTHERS', others, rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *argv], cwd=REPO, capture_output=True, text=True,
        timeout=60, env={**os.environ, "TRAINWIZ_HOME": str(tmp_path)},
    )  # fmt: skip
    assert "OTHERS [] " in proc.stdout, (proc.stdout[-600:], proc.stderr[-600:])
