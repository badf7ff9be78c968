"""Pilot tests of the Checks step: results land in the list, the fix shows for the highlighted
check, a failure holds back only its steps, re-run picks up a fixed machine, warnings pass."""

from __future__ import annotations

import http.server
import socket
import threading
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from backend.checks import CHECKS, CheckResult
from backend.i18n import _
from backend.preset.schema import Preset
from screens.checks import ChecksScreen
from tests.backend.test_checks_network import _Hub
from tests.waiting import pilot_until
from tui.app import TrainwizApp
from widgets.check_list import CheckList


@pytest.fixture(autouse=True)
def _offline_pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pip index check reads PIP_INDEX_URL: point it at a real local directory."""
    monkeypatch.setenv("PIP_INDEX_URL", f"file://{tmp_path}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _preset(tmp_path: Path, endpoint: str) -> Preset:
    return Preset.model_validate(
        {
            "schema": 1,
            "name": "pilot-checks",
            "model": {
                "source": "hf",
                "repo": "public/llama-1b",
                "endpoint": endpoint,
                "dir": str(tmp_path / "m"),
            },
            "launch": {"runner": "host", "device": "cpu", "master_port": _free_port()},
            "training": {"data_path": "d.json", "output_dir": str(tmp_path / "o")},
        }
    )


async def _settle(pilot: Pilot[Any], app: TrainwizApp) -> ChecksScreen:
    """Wait until every check has landed and the run is over."""
    screen = app.screen
    assert isinstance(screen, ChecksScreen)
    await pilot_until(
        pilot,
        lambda: not screen.running and len(screen.query_one(CheckList).results) == len(CHECKS),
        what="every check to land and the run to finish",
        timeout=30,
        seen=lambda: _status(screen),
    )
    return screen


def _status(screen: Any) -> str:
    """The status line of the Checks step."""
    return str(screen.query_one("#checks-status").render())


def _where(app: TrainwizApp) -> str:
    return f"step {app.current_step!r}, screen {type(app.screen).__name__}"


def _banner(app: TrainwizApp) -> str:
    """The blockers banner of the screen shown, or why there is none."""
    banners = app.screen.query("#step-blockers")
    if not banners:
        return f"no #step-blockers on {type(app.screen).__name__}"
    banner = banners.first()
    return f"display={banner.display}: {banner.render()}"


async def _highlight(pilot: Pilot[Any], screen: ChecksScreen, check_id: str) -> str:
    check_list = screen.query_one(CheckList)
    check_list.highlighted = check_list.get_option_index(check_id)
    title = _(check_list.titles.get(check_id, check_id))  # as the pane shows it
    await pilot_until(
        pilot,
        lambda: title in str(screen.query_one("#checks-detail-text").render()),
        what=f"the detail pane to show the {check_id} check",
        timeout=20,
        seen=lambda: str(screen.query_one("#checks-detail-text").render()),
    )
    return str(screen.query_one("#checks-detail-text").render())


async def test_failure_blocks_its_step_then_rerun_clears_it(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens yet: the Hub endpoint is refused
    app = TrainwizApp(_preset(tmp_path, f"http://127.0.0.1:{port}"), "test")
    async with app.run_test(size=(140, 40)) as pilot:
        screen = await _settle(pilot, app)
        results = screen.query_one(CheckList).results
        assert set(results) == {spec.id for spec in CHECKS}
        assert results["hf_endpoint"].status == "fail"
        assert screen.blocked == {"model": ["hf_endpoint"]}
        status = str(screen.query_one("#checks-status").render())
        assert "Disabled here: model (by hf_endpoint)" in status
        detail = await _highlight(pilot, screen, "hf_endpoint")
        assert "Fix" in detail and "hf-mirror.com" in detail and "Blocks: model" in detail
        # Blocked means "can't run", not "can't look": Continue opens Model with the blocker
        # shown, and fetching is refused with the reason.
        await pilot.press("c")
        await pilot_until(
            pilot,
            lambda: app.current_step == "model" and app.screen.query("#step-blockers"),
            what="the Model step with its blockers banner",
            timeout=20,
            seen=lambda: _where(app),
        )
        assert app.current_step == "model"
        banner = app.screen.query_one("#step-blockers")
        await pilot_until(
            pilot,
            lambda: banner.display and "hf_endpoint" in str(banner.render()),
            what="the Model step's banner to name hf_endpoint",
            timeout=20,
            seen=lambda: _banner(app),
        )
        assert banner.display and "hf_endpoint" in str(banner.render())
        app.screen.action_fetch()  # type: ignore[attr-defined]
        await pilot_until(
            pilot,
            lambda: any("hf_endpoint" in str(n.message) for n in app._notifications),
            what="fetching to be refused with a notification naming hf_endpoint",
            timeout=20,
            seen=lambda: [str(n.message) for n in app._notifications],
        )
        assert any("hf_endpoint" in str(n.message) for n in app._notifications)
        await pilot.press("ctrl+b")
        await pilot_until(
            pilot,
            lambda: app.current_step == "checks",
            what="the Checks step again",
            timeout=20,
            seen=lambda: _where(app),
        )
        assert app.current_step == "checks"
        # Bring the endpoint up on that port, re-run: nothing blocks, continue moves on.
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Hub)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            await pilot.press("r")
            screen = await _settle(pilot, app)
            assert screen.query_one(CheckList).results["hf_endpoint"].status == "ok"
            assert screen.blocked == {}
            assert not app.blocked
            await pilot.press("c")
            await pilot_until(
                pilot,
                lambda: app.current_step == "model",
                what="the Model step",
                timeout=20,
                seen=lambda: _where(app),
            )
            assert app.current_step == "model"
            await pilot_until(
                pilot,
                lambda: not app.screen.query_one("#step-blockers").display,
                what="the Model step's blockers banner to go",
                timeout=20,
                seen=lambda: _banner(app),
            )
            assert not app.screen.query_one("#step-blockers").display
        finally:
            server.shutdown()
            server.server_close()


async def test_warnings_do_not_block_and_skips_say_why(tmp_path: Path) -> None:
    """An overloaded Hub (HTTP 503) is a warning: Continue passes it."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        preset = _preset(tmp_path, f"http://127.0.0.1:{server.server_address[1]}")
        preset.model.repo = "busy/llama-1b"
        app = TrainwizApp(preset, "test")
        async with app.run_test(size=(140, 40)) as pilot:
            screen = await _settle(pilot, app)
            results = screen.query_one(CheckList).results
            assert results["hf_endpoint"].status == "warn"
            assert results["docker_daemon"].status == "skip"
            detail = await _highlight(pilot, screen, "docker_daemon")
            assert "launch.runner: host" in detail
            assert "model" not in screen.blocked
            await pilot.press("c")
            await pilot_until(
                pilot,
                lambda: app.current_step == "model",
                what="Continue to pass the warning and open the Model step",
                timeout=20,
                seen=lambda: f"{_where(app)}; checks: {_status(screen)}",
            )
            assert app.current_step == "model"
    finally:
        server.shutdown()
        server.server_close()


def test_bindings_have_ids() -> None:
    assert all(getattr(b, "id", None) for b in ChecksScreen.BINDINGS)


async def test_a_failure_disables_its_step_while_the_other_checks_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checks says "Disabled here" as soon as a blocking failure lands; the step it disables
    says so at the same moment, not only once the slowest check has finished."""
    release = threading.Event()
    failed = CheckResult(id="gpus", status="fail", summary="no NVIDIA driver", fix="install it",
                         blocks=["launch"])  # fmt: skip

    def slow_checks(preset: Preset, on_result: Any, cancel: threading.Event) -> list[CheckResult]:
        on_result(failed)
        release.wait(30)  # a slow check (a registry over a bad network) still running
        return [failed]

    monkeypatch.setattr("screens.checks.run_checks", slow_checks)
    app = TrainwizApp(_preset(tmp_path, "http://127.0.0.1:9"), "test")
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            screen = app.screen
            assert isinstance(screen, ChecksScreen)
            await pilot_until(
                pilot,
                lambda: "Disabled here" in _status(screen),
                what='"Disabled here" on the Checks status line',
                timeout=20,
                seen=lambda: _status(screen),
            )
            assert screen.running
            app.goto_step("launch")
            await pilot_until(
                pilot,
                lambda: app.screen.query_one("#step-blockers").display,
                what="the Launch step's blockers banner while the checks run",
                timeout=20,
                seen=lambda: f"{_where(app)}; {_banner(app)}",
            )
            banner = str(app.screen.query_one("#step-blockers").render())
            assert app.screen.query_one("#step-blockers").display, "no banner while checks run"
            assert "gpus: no NVIDIA driver" in banner
            assert app.blocked == {"launch": ["gpus"]}
    finally:
        release.set()


async def test_failures_landing_out_of_order_are_shown_in_the_checks_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checks run in parallel and land in any order; the banner lists them, and gives the first
    one's fix, in the order the finished list has (the same banner whichever landed first)."""
    release = threading.Event()
    ram = CheckResult(id="ram", status="fail", summary="needs 400 GiB", fix="add swap",
                      blocks=["launch"])  # fmt: skip
    driver = CheckResult(id="nvidia_driver", status="fail", summary="no driver",
                         fix="install cuda-drivers", blocks=["launch"])  # fmt: skip

    def slow_checks(preset: Preset, on_result: Any, cancel: threading.Event) -> list[CheckResult]:
        on_result(ram)  # the later check lands first
        on_result(driver)
        release.wait(30)
        return [driver, ram]

    monkeypatch.setattr("screens.checks.run_checks", slow_checks)
    app = TrainwizApp(_preset(tmp_path, "http://127.0.0.1:9"), "test")
    try:
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot_until(
                pilot,
                lambda: len(app.machine.checks or []) == 2,
                what="both failures to land",
                timeout=20,
                seen=lambda: [r.id for r in app.machine.checks or []],
            )
            assert [r.id for r in app.machine.checks or []] == ["nvidia_driver", "ram"]
            app.goto_step("launch")
            await pilot_until(
                pilot,
                lambda: (
                    "ram: needs 400 GiB" in str(app.screen.query_one("#step-blockers").render())
                ),
                what="the Launch step's banner to list both failures",
                timeout=20,
                seen=lambda: f"{_where(app)}; {_banner(app)}",
            )
            banner = str(app.screen.query_one("#step-blockers").render())
            assert banner.index("nvidia_driver: no driver") < banner.index("ram: needs 400 GiB")
            assert "Fix: install cuda-drivers" in banner
    finally:
        release.set()
