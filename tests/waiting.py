"""The one way a test waits for something to happen: poll the event it waits for against a
deadline, and on time-out fail saying what it waited for and what it saw last.

A fixed sleep is either too short on a loaded machine (a flaky test) or too long everywhere (a
slow suite); a poll with a deadline is neither. ``seen`` describes the state at the end (the
screen's status line, a run's state, a file's tail), so a failure explains itself without a
re-run. The deadlines are generous: they only bound a hang, a passing test never waits them out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

POLL_S = 0.02


class WaitTimeout(AssertionError):
    """What a test waited for did not happen within its deadline."""


def _describe(seen: Callable[[], object] | None, last: object) -> str:
    if seen is not None:
        try:
            return repr(seen())
        except Exception as exc:  # the description must never hide the time-out itself
            return f"<seen() raised {type(exc).__name__}: {exc}>"
    return repr(last)


def wait_until(
    check: Callable[[], T],
    *,
    what: str,
    timeout: float = 30.0,
    seen: Callable[[], object] | None = None,
    interval: float = POLL_S,
) -> T:
    """Call ``check`` until it returns something truthy and return that; an exception from
    ``check`` counts as not yet (a file half written, a process not started)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
        except Exception as exc:  # not there yet: keep the last error for the message
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"waited {timeout:g} s for {what}; saw {_describe(seen, last)}")
        time.sleep(interval)


async def pilot_until(
    pilot: Any,
    check: Callable[[], T],
    *,
    what: str,
    timeout: float = 30.0,
    seen: Callable[[], object] | None = None,
) -> T:
    """``wait_until`` for a Textual Pilot: between polls the app runs (``pilot.pause``), so
    messages, workers' callbacks and refreshes land; the check sees the app as a user would.
    Each poll lets the screen's pending messages run (``pause(0)``) but never waits for the
    whole process to go idle: a bare ``pause()`` waits up to a second for that whenever any
    thread is busy, as on a machine running tests side by side."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        await pilot.pause(0)
        try:
            result = check()
        except Exception as exc:  # a widget not mounted yet, a query that finds nothing yet
            last = exc
        else:
            if result:
                return result
            last = result
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"waited {timeout:g} s for {what}; saw {_describe(seen, last)}")
        await pilot.pause(POLL_S)
