"""Evidence ``lastfailure`` reads from single lines: a bare exception line that ends a
traceback although no frame is above it, and a tqdm bar that shows no progress.

A paste often keeps only an exception's last line (``Type: message``), and a one-line paste of
some library's printed message looks the same, so a bare line counts as a failure only with
evidence: frames above it (``lastfailure``), or, here, a message only a raise prints (ATen's
device check: ``Expected all tensors to be on the same device, but found at least two devices,
cuda:0 and cpu!`` and torch 2.x's ``… but got index is on cpu, different from other tensors on
cuda:0``), or a ``KeyError: 'k'`` whose key the line above subscripts (that frame's source
line, pasted without its indent: ``[f["k"] for f in features]``).

tqdm redraws its bar when the process exits: a bar left at ``0/N`` is no training progress, so
it does not settle an exception printed just before it.
"""

from __future__ import annotations

import re

_DEVICE_CHECK = re.compile(
    r"Expected all tensors to be on the same device, but (?:found at least two devices|got )"
)
_QUOTED_KEY = re.compile(r"(['\"])(?P<key>[^'\"]{1,80})\1")
_IDLE_BAR = re.compile(r"(?:^|[\s:|])0%\|[^|]*\|\s*0/\d+")


def ends_traceback(kind: str, msg: str, recent: list[str]) -> bool:
    """Is this bare ``Type: message`` the end of a traceback by its own evidence?"""
    if kind.endswith("RuntimeError"):
        return _DEVICE_CHECK.match(msg) is not None
    key = _QUOTED_KEY.fullmatch(msg.strip()) if kind.endswith("KeyError") else None
    return key is not None and any(
        f"[{q}{key['key']}{q}]" in line for line in recent[-2:] for q in "'\""
    )


def idle_bar(text: str) -> bool:
    """Is this line a tqdm bar at 0 of N steps?"""
    return _IDLE_BAR.search(text) is not None
