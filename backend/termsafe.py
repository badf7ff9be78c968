"""Text from logs made safe to print on a terminal: no escape sequences, no control characters.

A training log is written by the trainer, its libraries and whatever the preset ran; printing a
line of it raw lets an OSC sequence retitle the window, rewrite the clipboard (OSC 52) or hide
text, and a CSI sequence move the cursor over earlier output. Everything the diagnosis prints
from a log goes through ``terminal_safe``: ANSI/OSC/DCS sequences are removed, other control
characters shown as ``\\xNN``.
"""

from __future__ import annotations

import re

# OSC/DCS/SOS/PM/APC strings (ESC ] ... BEL|ST), CSI sequences, then two-byte ESC sequences.
_SEQUENCES = re.compile(
    r"\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-~]?"
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with escape sequences dropped and other control characters made visible."""
    text = _SEQUENCES.sub("", text)
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
