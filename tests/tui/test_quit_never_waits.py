"""Quitting the wizard never waits for a thread worker (the runs are detached).

``asyncio.run`` joins the loop's default executor before ``App.run`` returns: one worker blocked
in I/O kept the terminal after the user answered Quit. The wizard's App (``run_wizard`` sets
``leave_quickly``) gives its workers a pool whose shutdown does not wait.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from pathlib import Path

import pytest

from backend.preset import load_preset
from tui.app import TrainwizApp


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))


def _app() -> TrainwizApp:
    preset = load_preset("tiny-cpu")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    launch = preset.launch.model_copy(update={"master_port": port})
    return TrainwizApp(preset.model_copy(update={"launch": launch}), "tiny-cpu")


async def test_the_wizards_worker_pool_is_shut_down_without_waiting_for_a_blocked_worker() -> None:
    app = _app()
    app.leave_quickly = True
    release, started, finished = threading.Event(), threading.Event(), threading.Event()

    def blocked() -> None:  # a worker stuck in I/O, as a hung NVML call or file system is
        started.set()
        release.wait(20)
        finished.set()

    async with app.run_test(size=(120, 40)) as pilot:
        app.run_worker(blocked, thread=True, exit_on_error=False)
        await pilot.pause()
        assert started.wait(30)
        pool = asyncio.get_running_loop()._default_executor  # type: ignore[attr-defined]
        assert pool is not None
        pool.shutdown(wait=True)  # what asyncio.run does on the way out
        assert not finished.is_set()  # returned while the worker still blocks
    release.set()


async def test_an_app_not_from_run_wizard_keeps_asyncios_default_pool() -> None:
    """Pilot tests and embedders keep the usual executor (their loop is not the wizard's)."""
    app = _app()
    async with app.run_test(size=(120, 40)) as pilot:
        done = threading.Event()
        app.run_worker(done.set, thread=True, exit_on_error=False)
        await pilot.pause()
        assert done.wait(30)
        pool = asyncio.get_running_loop()._default_executor  # type: ignore[attr-defined]
        assert type(pool).__name__ == "ThreadPoolExecutor"
