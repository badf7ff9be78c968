"""Pilot tests of the Launch step: the real plan, the confirmation, a real launch, a refusal."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from backend.preset import load_preset
from backend.rundir import list_run_dirs
from backend.runs import read_status, stop_run
from backend.runs.spec import plan_spec
from screens.dialogs import ConfirmDialog
from screens.launch import LaunchScreen
from tests.waiting import pilot_until
from tui.app import TrainwizApp


def _app(preset: str = "tiny-cpu") -> TrainwizApp:
    return TrainwizApp(load_preset(preset), preset, start_step="launch")


async def _planned(app: TrainwizApp, pilot: Pilot[Any]) -> LaunchScreen:
    screen = app.screen
    assert isinstance(screen, LaunchScreen)
    await pilot_until(
        pilot,
        lambda: screen.plan is not None,
        what="the Launch step's plan",
        timeout=20,
        seen=lambda: _text(screen, "#launch-status"),
    )
    assert screen.plan is not None
    return screen


def _text(screen: Any, selector: str) -> str:
    return str(screen.query_one(selector).render())


def _screen_name(app: TrainwizApp) -> str:
    return type(app.screen).__name__


async def _confirm(app: TrainwizApp, pilot: Pilot[Any]) -> None:
    """Press l and wait for the launch's confirmation."""
    await pilot.press("l")
    await pilot_until(
        pilot,
        lambda: isinstance(app.screen, ConfirmDialog),
        what="the launch's confirmation",
        timeout=20,
        seen=lambda: _screen_name(app),
    )


async def _monitoring(app: TrainwizApp, pilot: Pilot[Any]) -> None:
    """Wait until the Monitor step shows the launched run with its followers started."""
    await pilot_until(
        pilot,
        lambda: app.current_step == "monitor",
        what="the Monitor step after the launch",
        timeout=30,
        seen=lambda: (
            f"step {app.current_step!r}, screen {_screen_name(app)}, "
            f"notes {[str(n.message) for n in app._notifications]}"
        ),
    )

    def ready() -> bool:
        screen: Any = app.screen
        run = getattr(screen, "run", None)
        return bool(
            screen.is_mounted
            and run is not None
            and run.run_dir == app.current_run
            and screen.query("#log")
            and any(w.node is screen and w.group == "monitor-log" for w in app.workers)
        )

    await pilot_until(  # the Monitor mounts fully (its log follower runs) before the app closes
        pilot,
        ready,
        what="the Monitor to follow the launched run",
        timeout=30,
        seen=lambda: (
            f"screen {_screen_name(app)}, run {getattr(app.screen, 'run', None)}, "
            f"workers {list(app.workers)}"
        ),
    )


async def test_plan_is_shown_command_by_command() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _planned(app, pilot)
        shown = _text(screen, "#launch-plan-text")
        assert [s.id for s in screen.plan.steps] == ["model", "train"]
        # The screen shows the launch's own argv: its torchrun and the port the plan took. The
        # port is the plan's, not one asked again here: a launch on another worker may hold the
        # first free one by now.
        train = screen.plan.step("train").full_argv()
        port = next(w for w in train if w.startswith("--master_port="))
        words = "".join(shown.split())  # the pane wraps long lines
        launch = f"{plan_spec(app.preset).torchrun} --nproc_per_node=1 {port}"
        assert "".join(launch.split()) in words
        assert "entry/train_entry.py" in shown
        assert "Not launched" in _text(screen, "#launch-status")


async def test_cancel_in_the_confirmation_starts_nothing() -> None:
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _planned(app, pilot)
        await _confirm(app, pilot)
        assert isinstance(app.screen, ConfirmDialog)
        assert "Launch tiny-cpu?" in str(app.screen.query_one("#confirm-summary").render())
        await pilot.press("n")
        await pilot_until(
            pilot,
            lambda: isinstance(app.screen, LaunchScreen),
            what="n to close the confirmation",
            timeout=20,
            seen=lambda: _screen_name(app),
        )
        assert isinstance(app.screen, LaunchScreen)
        assert list_run_dirs() == []


async def test_confirmed_launch_starts_a_detached_run_and_opens_the_monitor() -> None:
    app = _app()
    run_dir: Path | None = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await _planned(app, pilot)
            await _confirm(app, pilot)
            await pilot.press("y")
            await _monitoring(app, pilot)
            assert app.current_step == "monitor"
            run_dir = app.current_run
            assert run_dir is not None and run_dir.parent.name == "runs"
            status = read_status(run_dir)
            assert status.watcher_pid and status.state in ("starting", "running")
            assert (run_dir / "plan.json").is_file() and (run_dir / "launch.json").is_file()
    finally:
        if run_dir is not None:
            stopped = stop_run(run_dir, timeout=5)
            assert stopped.state in ("stopped", "failed", "finished")


# Bound here by the holder below, or claimed by a run another test worker launched a moment ago.
REPLACED = re.compile(r"launch\.master_port 29511 is (in use here|chosen by another run): using")


async def test_a_busy_master_port_replaced_by_launch_is_said() -> None:
    """The preset's master_port is taken on this machine: launch picks a free one and records it;
    the wizard must say so (it used to drop LaunchResult.notes on the floor)."""
    import socket

    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        holder.bind(("0.0.0.0", 29511))
    except OSError:
        pass  # already busy on this machine: the launch must replace it all the same
    holder.listen()
    app = _app()
    run_dir: Path | None = None
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await _planned(app, pilot)
            await _confirm(app, pilot)
            await pilot.press("y")
            await pilot_until(
                pilot,
                lambda: app.current_step == "monitor",
                what="the Monitor step after the launch",
                timeout=30,
                seen=lambda: f"step {app.current_step!r}, screen {_screen_name(app)}",
            )
            assert app.current_step == "monitor"
            run_dir = app.current_run
            await pilot_until(  # notify() posts a message: the app takes it a moment later
                pilot,
                lambda: any(REPLACED.search(str(n.message)) for n in app._notifications),
                what="a notification that the busy master_port was replaced",
                timeout=20,
                seen=lambda: [str(n.message) for n in app._notifications],
            )
            said = [str(n.message) for n in app._notifications]
            assert any(REPLACED.search(m) for m in said), said
            await _monitoring(app, pilot)
    finally:
        holder.close()
        if run_dir is not None:
            stop_run(run_dir, timeout=5)


async def test_a_refused_launch_is_explained(tmp_path: Path) -> None:
    preset = load_preset("tiny-cpu")
    preset.environment.venv = str(tmp_path / "missing-venv")
    app = TrainwizApp(preset, "tiny-cpu", start_step="launch")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _planned(app, pilot)
        await _confirm(app, pilot)
        await pilot.press("y")
        await pilot_until(
            pilot,
            lambda: "refused" in _text(screen, "#launch-status"),
            what="the launch to be refused on the status line",
            timeout=20,
            seen=lambda: _text(screen, "#launch-status"),
        )
        status = _text(screen, "#launch-status")
        assert "Launch refused" in status and "environment.venv" in status
        assert app.current_step == "launch"
        assert list_run_dirs() == []


@pytest.mark.parametrize("binding", ["launch.start", "launch.replan", "launch.monitor"])
def test_bindings_have_ids(binding: str) -> None:
    assert binding in {b.id for b in LaunchScreen.BINDINGS}  # type: ignore[union-attr]


async def test_confirmation_names_dangerous_container_options() -> None:
    """A shared preset asking for a privileged container with the host's root mounted: the
    wizard's own yes shows each risk, with its fix, before anything runs."""
    from backend.preset.schema import Volume

    preset = load_preset("vicuna-7b-4xa100-40g").model_copy(deep=True)
    preset.container.privileged = True
    preset.container.volumes = [*preset.container.volumes, Volume(host="/", container="/host")]
    app = TrainwizApp(preset, "shared.yaml", start_step="launch")
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await _planned(app, pilot)
        text = str(screen.confirm_dialog().body)
    assert "WARNING container.privileged" in text
    assert "WARNING container.volumes" in text


async def test_after_run_all_the_launch_step_names_the_run(tmp_path: Path) -> None:
    """Run all launches through the same pipeline: the Launch step must not then say "Not
    launched" (the session's run is the App's, whichever way it was started)."""
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        await _planned(app, pilot)
        assert "Not launched" in _text(app.screen, "#launch-status")
        run = tmp_path / "runs" / "20261201-000000-tiny-cpu"
        app.last_launched = run  # what Run all's finish records, beside current_run
        app.current_run = run
        app.goto_step("hyperparams")
        await pilot_until(
            pilot,
            lambda: app.current_step == "hyperparams" and app.screen.is_mounted,
            what="the Hyperparameters step",
            timeout=20,
            seen=lambda: f"step {app.current_step!r}, screen {_screen_name(app)}",
        )
        app.goto_step("launch")
        await pilot_until(
            pilot,
            lambda: f"Launched run {run.name}" in _text(app.screen, "#launch-status"),
            what="the Launch step to name the run",
            timeout=20,
            seen=lambda: f"screen {_screen_name(app)}: {_text(app.screen, '#launch-status')}",
        )
        status = _text(app.screen, "#launch-status")
        assert "Not launched" not in status and f"Launched run {run.name}" in status
