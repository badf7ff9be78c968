"""`trainwiz stop` on a served run counts the processes it ended, the servers included.

A finished run with `trainwiz serve --detach` servers (a supervisor and three marked processes)
used to be answered "0 process(es) ended; none of the run is left" after all four were ended:
the count was the training's alone. The count is now the backend's own result for both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from backend.procinfo import proc_info
from tests.fake_serve import fake_serve
from tests.run_records import make_ended_run
from tests.trainwiz_cli import cli


def _home() -> Path:
    return Path(os.environ["TRAINWIZ_HOME"])


def test_stop_counts_the_servers_it_ended() -> None:
    run_dir = make_ended_run(_home(), "finished", None, preset="tiny-cpu", log="done\n")
    served = fake_serve(run_dir)
    try:
        out = cli("stop", run_dir.name, "--timeout", "5")
        assert "4 process(es) ended" in out.stdout, out.stdout
        assert not [pid for pid in served.pids if proc_info(pid) is not None]
    finally:
        served.end()


def test_stop_json_counts_the_servers_too() -> None:
    run_dir = make_ended_run(_home(), "stopped", None, preset="tiny-cpu", log="done\n")
    served = fake_serve(run_dir, workers=2)
    try:
        record = json.loads(cli("stop", run_dir.name, "--json", "--timeout", "5").stdout)
        assert record["ended_processes"] == 3 and record["left_processes"] == []
    finally:
        served.end()
