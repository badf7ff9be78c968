"""Text from a file, a run record or an argument made safe to print on a terminal.

A training log is written by the trainer, its libraries and whatever the preset ran; a run's
status.json and preset.yaml by that run; an argument by whoever typed or scripted it. Printed raw,
an OSC sequence retitles the window, rewrites the clipboard (OSC 52) or hides text, a CSI sequence
(``ESC [`` or the C1 byte ``\\x9b``) clears the screen or moves the cursor over earlier output, a
lone carriage return overwrites the line before it, and a bidi override (U+202E, U+2066...) shows
text in another order than it is stored ("Trojan Source"). So every CLI path that prints such
text goes through ``terminal_safe``, the one function that decides what a terminal may receive:
the CLI's error printer, `logs` (and ``-f``), `runs`, `runs compare`, `replay`, `diagnose`,
`model validate`, `data`.
"""

from __future__ import annotations

import re

# OSC/DCS/SOS/PM/APC strings (ESC ] ... BEL|ST), CSI sequences, then two-byte ESC sequences.
# An unterminated string ends at the line's end: one stray ESC ] must not swallow the rest of a
# 64 KiB log chunk (terminals differ on where it ends; the text after it is shown, as text).
_SEQUENCES = re.compile(
    r"\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)?"
    r"|\x9b[0-?]*[ -/]*[@-~]"
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-~]?"
)
# Bidi embeddings, overrides and isolates: they reorder what follows them on screen.
_BIDI = re.compile(r"[\u202a-\u202e\u2066-\u2069]")
# Every character a terminal acts on rather than shows; newline and tab are the text's layout.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# CRLF is a newline; a lone CR (a tqdm redraw) becomes one too, so nothing is overwritten.
_CARRIAGE_RETURN = re.compile(r"\r\n?")


def terminal_safe(text: str, *, show_sequences: bool = False) -> str:
    """``text`` with nothing in it that a terminal would obey: escape sequences and bidi controls
    dropped (a log's colours are noise, its titles and clipboard writes an attack), a carriage
    return made a line break, any other control character shown as ``\\xNN``. Newlines and tabs
    stay.

    ``show_sequences`` drops nothing and shows every such character as ``\\xNN`` / ``\\uNNNN``
    (``\\r`` too): for an error that quotes an argument, where dropping would tell the user
    ``run '': no such run`` about what they typed."""
    if not show_sequences:
        text = _CARRIAGE_RETURN.sub("\n", _BIDI.sub("", _SEQUENCES.sub("", text)))
    return _CONTROLS.sub(_shown, text)


def _shown(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"
