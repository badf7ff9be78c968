"""The quick tier's time budget: measured durations decide which fast-tier tests stay in it.

The quick tier (``--quick``) is for the edit-test loop and must end in under three minutes on
this 2-core machine. Leaving out trainings, services and the real terminal is not enough on its
own: a few Pilot walks and CLI sweeps of a few seconds each add up to a minute. As pytest-split
does for its groups, the suite keeps each such test's measured time in ``tests/durations.json``
and ``--quick`` leaves out the ones over ``QUICK_MAX_S``. The full tier (CI) runs them all.

``--record-durations PATH`` writes that file from the run it ends (setup + call + teardown per
test, those over ``RECORDED_MIN_S``); it also keeps every fast-tier test in the run, so
``bash scripts/test.sh --quick --record-durations tests/durations.json`` measures them all again.
A test the file does not name (a new one) stays in the quick tier until it is recorded.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
# A fast-tier test that took longer than this (3 workers, 2 cores) runs in the full tier only.
QUICK_MAX_S = 1.5
# Only these are worth recording: the rest stay in the quick tier whatever the threshold.
RECORDED_MIN_S = 0.5
# xdist shows a grouped test's id with "@group" after it; the file keeps the plain id.
_GROUP_SUFFIX = re.compile(r"@[\w-]+$")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        metavar="PATH",
        default=None,
        help=f"write each test's measured time (over {RECORDED_MIN_S} s) to PATH as JSON; with "
        "--quick, every fast-tier test runs (none is left out for its recorded time)",
    )


def recorded_durations(path: Path = DURATIONS) -> dict[str, float]:
    """The committed measurements; an absent file keeps every test (nothing measured yet)."""
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return {str(k): float(v) for k, v in data.items()}


def too_slow_for_quick(node_ids: list[str], durations: dict[str, float]) -> set[str]:
    """The ids whose recorded time is over the quick tier's budget per test."""
    return {i for i in node_ids if durations.get(_GROUP_SUFFIX.sub("", i), 0.0) > QUICK_MAX_S}


class _Recorder:
    """Adds up each test's phases as the reports arrive (on the controller under xdist)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: Counter[str] = Counter()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_GROUP_SUFFIX.sub("", report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        kept = {k: round(v, 2) for k, v in sorted(self.seconds.items()) if v > RECORDED_MIN_S}
        self.path.write_text(json.dumps(kept, indent=0, sort_keys=True) + "\n", encoding="utf-8")


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("--record-durations")
    if path and not hasattr(config, "workerinput"):  # the controller sees every report
        config.pluginmanager.register(_Recorder(Path(path)), "trainwiz-record-durations")
