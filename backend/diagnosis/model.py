"""The diagnosis data model: what the classifier finds and what it proposes to change.

Plain dataclasses so that the CLI (JSON), the monitor (line colours) and the troubleshoot screen
share one shape without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning", "info"]

SEVERITY_RANK: dict[str, int] = {"error": 0, "warning": 1, "info": 2}


@dataclass(frozen=True)
class LineFlag:
    """What one log line is, for colouring a live log pane (no context, no fixes)."""

    category: str
    severity: Severity
    title: str


@dataclass
class PresetChange:
    """One edit to a preset: a dotted path (``training.per_device_train_batch_size``) and value."""

    path: str
    value: Any
    reason: str


@dataclass
class Fix:
    """One way out of a failure; ``changes`` is empty when the fix is outside the preset."""

    title: str
    reason: str
    changes: list[PresetChange] = field(default_factory=list)
    # For a memory failure, the planner's word on this fix where it can judge it on this machine
    # (backend/runs/memfixes.py): True closes the gap, False is not enough alone, None unjudged.
    plan_fits: bool | None = None


@dataclass
class Finding:
    """One recognised failure: where it was seen, what it means, and how to get past it."""

    category: str
    severity: Severity
    line: int
    lines: list[int]
    text: str
    title: str
    explanation: str
    fixes: list[Fix] = field(default_factory=list)
    count: int = 1
    # A multi-node run's log names each line's node ("[node1 gpu-b] ..."): the node of the
    # line shown, and every node this failure was seen on (docs/multi-node.md).
    node: str | None = None
    nodes: list[str] = field(default_factory=list)
    # The log's lines around a failure no category knows (its traceback), for `diagnose --json`:
    # the quoted text is the decisive line(s) only (backend/diagnosis/unrecognised.py).
    context: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    """All findings of one log, most severe first (root causes before symptoms), then by line."""

    findings: list[Finding] = field(default_factory=list)
    lines_read: int = 0
    bytes_read: int = 0

    @property
    def has_error(self) -> bool:
        return any(f.severity == "error" for f in self.findings)

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None
