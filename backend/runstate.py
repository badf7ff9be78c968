"""A run's state, once: its value in status.json, its label on screen and its colour.

Every place that shows a state (the monitor's throughput panel, ``trainwiz runs``) asks this
enum instead of spelling its own table.
"""

from __future__ import annotations

from enum import Enum

from backend.i18n import N_, _


class RunState(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"

    @classmethod
    def of(cls, value: str) -> RunState | None:
        try:
            return cls(value)
        except ValueError:
            return None

    @property
    def final(self) -> bool:
        return self in (RunState.FINISHED, RunState.FAILED, RunState.STOPPED)

    @property
    def label(self) -> str:
        """The state in the user's language (a state without a label shows its value)."""
        text = _LABELS.get(self)
        return _(text) if text else self.value

    @property
    def style(self) -> str:
        return _STYLES.get(self, "")


_LABELS = {
    RunState.RUNNING: N_("running"),
    RunState.FINISHED: N_("finished"),
    RunState.FAILED: N_("failed"),
    RunState.STOPPED: N_("stopped"),
}
_STYLES = {
    RunState.RUNNING: "green",
    RunState.FINISHED: "cyan",
    RunState.FAILED: "red",
    RunState.STOPPED: "yellow",
}
FINAL_STATES: tuple[str, ...] = tuple(s.value for s in RunState if s.final)
