"""The types of the signature tables: a failure signature and a phase marker.

Split from ``signatures.py`` so that the tables can live in more than one module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

from backend.diagnosis.model import Severity


@dataclass(frozen=True)
class Signature:
    category: str
    severity: Severity
    title: str
    source: str  # the regex; compiled on first use (most never run on a given log)
    anchors: tuple[str, ...]
    window: int = 0  # following lines joined to this one (hard-wrapped messages)
    needs: tuple[str, int] | None = None  # (context name, within N lines before)
    # (context name, within N lines before or after): a match waits for the context to show
    # up later (a traceback's frames follow its "direct cause"); without it, no finding.
    near: tuple[str, int] | None = None
    flags: int = 0

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        return re.compile(self.source, self.flags)


@dataclass(frozen=True)
class Marker:
    """A line that is no failure itself but tells the phase (saving, pip building)."""

    context: str
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]


def sig(
    category: str,
    severity: Severity,
    title: str,
    pattern: str,
    anchors: tuple[str, ...],
    *,
    window: int = 0,
    needs: tuple[str, int] | None = None,
    near: tuple[str, int] | None = None,
    flags: int = 0,
) -> Signature:
    return Signature(category, severity, title, pattern, anchors, window, needs, near, flags)


EXIT = r"(?:exitcode|exit code|return code|returncode|exit status)\s*[:=]?\s*"
# torch's "exitcode: -9", docker's "exit code 137", deepspeed's "return code = -9"
EXIT_ANCHORS = ("xitcode", "xit code", "xit status", "= -", "=-")
