"""A run's own paths, read in the directory the run is in now (re-exported by backend.rundir).

A run records absolute paths into its own directory: preset.yaml holds ``@run/output`` resolved
(the output folder), launch.json the run dir, the preset file, the trainer's argv and
environment. A run directory copied (``cp -r``, a backup restored, another TRAINWIZ_HOME) keeps
those records word for word, so a resume of the copy wrote its checkpoints into the original's
folder and chat, serve and export of the copy read the original's model. Every reader of a run
record therefore goes through ``own_paths``: a path into the directory the run was launched in
is the same path inside this one. Paths outside the run (a shared output folder, the model, the
data) are left as they are.

Where the run was launched is known from its records: the ``run_dir`` each launch spec names
(launch.json, launch.N.json), and any path whose folder is ``runs/<run_id>`` (the id status.json
keeps: run dirs are made under ``$TRAINWIZ_HOME/runs`` with that name), which still finds the
original after the copy's own resume has rewritten launch.json.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backend.paths import LAUNCH, STATUS

# A path starts the text or follows a separator, never a path or word character ...
_START = r"(?<![\w.\-/~])"
# ... and a run dir's path ends there, or goes on with "/" (a file in it) or a separator.
_END = r"(?=[/:\s'\",;)\]]|$)"
_PATH_CHARS = r"[^\s:'\",;=()\[\]]"


def own_paths(run_dir: Path) -> Callable[[str], str]:
    """A function mapping a string from this run's records to this directory: every path in
    it that leads into the directory the run was launched in now leads into ``run_dir``
    (a path alone, ``--flag=PATH``, a volume ``HOST:CONTAINER``, a command line). The same
    string, unchanged, for a run that was never copied."""
    here = os.path.abspath(run_dir)
    named = [re.escape(origin) for origin in _launched_in(Path(here)) if origin != here]
    run_id = _run_id(Path(here))
    named.append(r"(?:/" + _PATH_CHARS + r"*)?/runs/" + re.escape(run_id))
    pattern = re.compile(_START + "(?:" + "|".join(named) + ")" + _END)

    def moved(match: re.Match[str]) -> str:
        tail = match.string[match.start() :]
        if tail.startswith(here) and re.match(_END, tail[len(here) :]):
            return match.group(0)  # already this directory (one inside the original, too)
        return here

    def own(value: str) -> str:
        if "/" not in value:
            return value
        out = pattern.sub(moved, value)
        return value if out == value else out

    return own


def own_record(run_dir: Path, data: Any) -> Any:
    """``data`` (a run record as JSON: dicts, lists, strings) with ``own_paths`` applied to
    every string and key in it; ``data`` itself when nothing changed."""
    return _mapped(data, own_paths(run_dir))


def _mapped(value: Any, own: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return own(value)
    if isinstance(value, list):
        items = [_mapped(item, own) for item in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    if isinstance(value, dict):
        pairs = [(_mapped(k, own), _mapped(v, own)) for k, v in value.items()]
        same = all(k is a and v is b for (k, v), (a, b) in zip(pairs, value.items()))
        return value if same else dict(pairs)
    return value


def _launched_in(run_dir: Path) -> set[str]:
    """The run directories this run's launch specs name (launch.json and every
    launch.N.json of ``backend.paths.attempt_launch``)."""
    found = set()
    for path in [run_dir / LAUNCH, *run_dir.glob("launch.*.json")]:
        named = _json(path).get("run_dir")
        if isinstance(named, str) and named.startswith("/"):
            found.add(os.path.normpath(named))
    return found


def _run_id(run_dir: Path) -> str:
    """The id the run was launched with (status.json's; a renamed copy keeps it)."""
    named = _json(run_dir / STATUS).get("run_id")
    return named if isinstance(named, str) and named and "/" not in named else run_dir.name


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
