"""One RunState: status.json's values, the final ones, and the label and colour screens show."""

from __future__ import annotations

import typing

from backend.rundir import FINAL_STATES, RunStatus
from backend.runstate import RunState
from widgets.throughput import render_summary


def test_the_enum_is_the_records_vocabulary() -> None:
    recorded = typing.get_args(RunStatus.model_fields["state"].annotation)
    assert {s.value for s in RunState} == set(recorded)
    assert FINAL_STATES == ("finished", "failed", "stopped")
    assert RunStatus(run_id="r", preset="p", runner="host", state="failed").final


def test_the_monitor_shows_the_enums_label_and_style() -> None:
    for state in RunState:
        head = render_summary(None, state.value)
        assert f" {state.label}" in head.plain
        spans = [s for s in head.spans if head.plain[s.start : s.end].strip() == state.label]
        assert (spans[0].style if spans else "") == state.style
    assert RunState.of("bogus") is None
    assert " bogus" in render_summary(None, "bogus").plain


def test_rundir_names_its_files_status_and_records(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from backend.rundir import RunDir, create_run_dir, update_status, write_attempts

    path = create_run_dir("p", "host")
    update_status(path, state="running")
    write_attempts(path, [{"attempt": 1, "how": "launch"}])
    (path / "launch.json").write_text(json.dumps({"kind": "launch", "attempt": 1}))
    (run,) = RunDir.all()
    assert run.path == path and run.run_id == path.name
    assert run.state() is RunState.RUNNING and run.status().state == "running"
    assert run.attempts() == [{"attempt": 1, "how": "launch"}]
    assert run.launch_spec()["kind"] == "launch" and run.plan() == {}
    assert run.file("train.log") == path / "train.log"
