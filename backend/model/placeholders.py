"""Placeholders that let a shipped preset name places that only exist on the user's machine.

``@home`` is trainwiz's state directory, ``@sample`` the bundled sample conversations and
``@run`` the run directory of a launch. They are resolved when a preset is used (never when it
is saved), so the same preset file works on every machine.
"""

from __future__ import annotations

import os
from pathlib import Path

from backend import paths
from backend.errors import BadInput
from backend.i18n import _

SAMPLE_CONVERSATIONS = (
    Path(__file__).resolve().parents[2] / "presets" / "data" / ("sample_conversations.json")
)

PLACEHOLDERS = ("@home", "@sample", "@run")


def resolve_placeholders(value: str, run_dir: Path | None) -> str:
    """Replace a leading ``@home``, ``@sample`` or ``@run`` by a real path.

    Only a leading placeholder followed by ``/`` or the end of the string counts, so an ``@`` in
    the middle of a path (an email-like directory name) is left alone.
    """
    for name in PLACEHOLDERS:
        if value == name or value.startswith(name + "/"):
            rest = value[len(name) :].lstrip("/")
            base = _base(name, run_dir)
            resolved = str(base / rest) if rest else str(base)
            if name == "@home":
                _refuse_home_itself(value, Path(resolved))
            return resolved
    return value


def _refuse_home_itself(value: str, path: Path) -> None:
    """``@home`` alone (or ``@home/runs``, ``@home/..``) would hand trainwiz's whole state to
    whatever the field does with a directory: a model made there replaces it, runs included."""
    target = Path(os.path.abspath(path))
    home = Path(os.path.abspath(paths.home()))
    runs = Path(os.path.abspath(paths.runs_dir()))
    if target in (home, runs) or target in runs.parents:
        raise BadInput(
            _(
                "'{value}' resolves to {target}, trainwiz's own state directory (or one holding "
                "its runs): name a folder inside it, e.g. @home/models/NAME"
            ).format(value=value, target=target)
        )


def _base(name: str, run_dir: Path | None) -> Path:
    if name == "@home":
        return paths.home()
    if name == "@sample":
        return SAMPLE_CONVERSATIONS
    if run_dir is None:
        raise BadInput(_("'@run' is only known once a run directory exists: use it in a launch"))
    return run_dir
