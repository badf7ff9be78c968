"""Troubleshoot on a Slurm run whose only logs are its nodes' own (the watcher never copied
them into train.log): the run is listed, the finding names its node, and its preset-change fix
is offered as one, reviewed as a diff, and relaunched only after confirmation."""

from __future__ import annotations

import json
import os
from pathlib import Path

from textual.widgets import OptionList

from backend.preset import load_preset
from backend.preset.loader import preset_to_yaml
from backend.preset.schema import Preset
from backend.runs.diagnose_run import diagnosable_runs
from screens.fix_review import FixReviewDialog
from screens.troubleshoot import TroubleshootScreen
from tests.waiting import pilot_until

RUN_ID = "20261201-140000-slurm-cut"
CORPUS3 = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus3"


def _status(screen: object) -> str:
    """Troubleshoot's status line (empty on another screen)."""
    found = screen.query("#ts-status")  # type: ignore[attr-defined]
    return str(found.first().render()) if found else ""


def _make_run() -> Path:
    run = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / RUN_ID
    (run / "nodes").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({"run_id": RUN_ID, "state": "failed"}))
    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    preset.launch.slurm.time_limit = "12:00:00"
    (run / "preset.yaml").write_text(preset_to_yaml(preset))
    # a real thread's time-limit lines as node 1's own log
    source = CORPUS3 / "slurm_time_limit" / "zetta-671-job-and-step-cancelled.log"
    (run / "nodes" / "node1-gpu-b.log").write_bytes(source.read_bytes())
    return run


async def test_a_node_only_slurm_run_offers_its_time_limit_as_a_preset_change() -> None:
    from tui.app import TrainwizApp

    _make_run()
    assert [r.run_id for r in diagnosable_runs()] == [RUN_ID]
    launched: list[Preset] = []
    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu")
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        app.push_screen(TroubleshootScreen(run_id=RUN_ID, relaunch=launched.append))
        await pilot_until(
            pilot,
            lambda: getattr(app.screen, "diagnosis", None) is not None,
            what="the run's diagnosis on the Troubleshoot screen",
            timeout=30,
            seen=lambda: f"{type(app.screen).__name__}: {_status(app.screen)}",
        )
        await pilot.pause()  # the first finding's highlight (a message) shows its fixes again
        screen = app.screen
        assert isinstance(screen, TroubleshootScreen) and screen.diagnosis is not None
        top = screen.diagnosis.findings[0]
        assert (top.category, top.node) == ("slurm_time_limit", "node1 gpu-b")
        findings = screen.query_one("#ts-findings", OptionList)
        assert "slurm_time_limit  node1" in str(findings.get_option_at_index(0).prompt)
        fixes = screen.query_one("#ts-fixes", OptionList)
        labels = [str(fixes.get_option_at_index(i).prompt) for i in range(fixes.option_count)]
        index = next(i for i, label in enumerate(labels) if "1-00:00:00" in label)
        assert labels[index].endswith("(preset change)"), labels
        assert labels[0].endswith("(advice)") or labels[0].endswith("(resume: asks first)")
        fixes.focus()
        fixes.highlighted = index
        await pilot.press("enter")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, FixReviewDialog),
            what="the fix review dialog",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
        dialog = app.screen
        assert isinstance(dialog, FixReviewDialog)
        assert any(line.startswith("+    time_limit: 1-00:00:00") for line in dialog.diff), (
            dialog.diff
        )
        assert launched == []  # nothing before confirmation
        await pilot.press("y")
        await pilot_until(
            pilot,
            lambda: launched,
            what="the relaunch callback to get the fixed preset",
            timeout=20,
            seen=lambda: type(app.screen).__name__,
        )
    assert len(launched) == 1 and launched[0].launch.slurm.time_limit == "1-00:00:00"
