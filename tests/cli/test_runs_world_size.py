"""`trainwiz runs` shows the world size each run trained with (the trainer's, from its start
record) in a WORLD column and in --json, not only a note when it differs from the plan."""

from __future__ import annotations

import json

from backend.monitor.world import trainer_start
from tests.backend.test_world_size import finished_run
from tests.trainwiz_cli import cli


def _column(text: str, run_id: str, name: str) -> str:
    """The value under the header ``name`` on ``run_id``'s line (columns are space-aligned)."""
    lines = text.splitlines()
    head = next(line for line in lines if line.startswith("RUN "))
    row = next(line for line in lines if line.startswith(run_id))
    at = head.index(name)
    return row[at:].split()[0]


def test_runs_shows_the_trainers_world_size() -> None:
    agreeing = finished_run(nproc=2, trainer_world=2)
    differing = finished_run(nproc=2, trainer_world=1)
    text = cli("runs").stdout
    assert "WORLD" in text.splitlines()[0], text
    for run_dir in (agreeing, differing):
        start = trainer_start(run_dir) or {}
        assert _column(text, run_dir.name, "WORLD") == str(start["world_size"]), text
    listed = {r["run_id"]: r for r in json.loads(cli("runs", "--json").stdout)}
    assert listed[agreeing.name]["world_size"] == 2 and listed[differing.name]["world_size"] == 1


def test_a_run_without_a_start_record_shows_a_dash() -> None:
    run_dir = finished_run(nproc=1, trainer_world=1)
    (run_dir / "metrics.jsonl").write_text("")
    text = cli("runs").stdout
    assert _column(text, run_dir.name, "WORLD") == "-", text
    assert json.loads(cli("runs", "--json").stdout)[0]["world_size"] is None
