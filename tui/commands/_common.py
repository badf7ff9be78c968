"""Small helpers shared by the CLI command modules."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import textwrap
from typing import Any, TextIO

from backend.i18n import _
from backend.termsafe import terminal_safe


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help=_("print machine-readable JSON"))


# A space run, an unbroken run of ASCII (a word, a flag, a path), or any other single character:
# Chinese breaks between any two characters, English only at spaces.
_TOKEN = re.compile(r"\s+|[\x21-\x7e]+|.")
# Punctuation that never starts a line in Chinese typesetting: it stays on the line before.
_NO_LINE_START = set("，。、；：！？）》」』”’…")


def pad_cells(text: str, width: int) -> str:
    """``text`` padded to ``width`` terminal cells (错误 is two characters, four cells)."""
    from rich.cells import cell_len

    return text + " " * max(0, width - cell_len(text))


def fill_cells(text: str, width: int) -> str:
    """``textwrap.fill`` by terminal cells: a CJK character takes two cells and needs no space
    to break at, so a Chinese paragraph is wrapped where an English one would be."""
    from rich.cells import cell_len

    if cell_len(text) == len(text):
        return textwrap.fill(text, width)
    lines: list[str] = []
    for paragraph in text.splitlines() or [""]:
        line = ""
        for token in _TOKEN.findall(paragraph):
            if line and token not in _NO_LINE_START and cell_len(line + token.rstrip()) > width:
                lines.append(line.rstrip())
                line = "" if token.isspace() else token
            else:
                line += token
        lines.append(line.rstrip())
    return "\n".join(lines)


def say(text: str = "", *, stderr: bool = False, end: str = "\n", flush: bool = False) -> None:
    """``print`` for a line that holds text read from a file or a run record (a log, a status
    message, a preset value, a run id that is a directory's name): through ``terminal_safe``, so
    what a run wrote is shown, never obeyed by the terminal."""
    stream: TextIO = sys.stderr if stderr else sys.stdout
    print(terminal_safe(text), end=end, file=stream, flush=flush)


def print_json(payload: Any) -> None:
    """Print dataclasses / pydantic models / plain data as indented JSON."""
    print(json_text(payload))


def json_text(payload: Any) -> str:
    """What ``--json`` prints: the one serialisation the CLI and the MCP server's results share."""
    return json.dumps(to_jsonable(payload), indent=2, default=str)


def to_jsonable(obj: Any) -> Any:
    from pydantic import BaseModel  # here, not at import: `diagnose FILE` starts without it

    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: to_jsonable(v) for k, v in dataclasses.asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj
