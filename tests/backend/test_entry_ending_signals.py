"""A stop reaches a rank twice: ``trainwiz stop`` TERMs every process of the run, and torchrun,
TERMed too, forwards a TERM to its workers. The rank must take the first as its ending and the
second must not cut that ending short: the rank's record and end line are what a stopped run's
record is built from (a second TERM under the default action killed a rank mid-record now and
then: ``ranks/rank0.json`` missing after a stop).

The real ``backend/entry/ending.py`` in a real process, the real torch passed in (no group is
initialised: the point here is the signals, not the collectives).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

ENTRY = Path(__file__).resolve().parents[2] / "backend" / "entry"

CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    import ending, torch

    record = sys.argv[2]

    def work():
        try:
            print("ready", flush=True)
            time.sleep(60)
        except BaseException:
            print("ending", flush=True)
            time.sleep(0.5)  # the rank record and the end line take a while
            with open(record, "w") as handle:
                handle.write("written")
            raise

    ending.on_sigterm()
    ending.finish(work, torch, 0)
    """
)


def test_a_second_term_does_not_cut_a_stopping_rank_short(tmp_path: Path) -> None:
    record = tmp_path / "rank0.json"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ENTRY), str(record)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGTERM)  # trainwiz stop
        assert proc.stdout.readline().strip() == "ending"
        os.kill(proc.pid, signal.SIGTERM)  # torchrun forwarding its own TERM
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert record.read_text() == "written"
    assert proc.returncode == -signal.SIGTERM  # still ended as a stopped process ends
