"""The App's side of runs: the Runs view, a live run found on start, the questions asked
before a second launch or a quit, and Chat from the palette (refused like the Monitor's key).

Runs are read by ``screens.runs`` (the one place that knows the run-directory API), always in a
thread; these methods only decide what to show and ask.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from textual.app import App

from backend.i18n import N_, _

if TYPE_CHECKING:
    from backend.preset import Preset


class _NoWaitExecutor(ThreadPoolExecutor):
    """The pool of the wizard's thread workers, which closing the App never waits for.

    ``asyncio.run`` joins the default executor before ``App.run`` returns, so one worker still
    blocked (an NVML call, a slow file system, a follower between polls) would keep the
    terminal after the user said Quit. The runs are detached; no worker holds anything that
    must finish.
    """

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)


def leave_now(code: int) -> NoReturn:
    """End the wizard process as soon as the App has closed and given the terminal back.

    The interpreter's own exit would join the workers' threads and garbage-collect every
    step's widget tree (2-3 s at load 8, with the Monitor's log in memory); the training
    belongs to its watcher, so nothing is lost by skipping that.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


class RunsMixin(App[int]):
    """Mixed into ``TrainwizApp``; ``preset``, ``current_run``, ``edited`` are the App's."""

    current_run: Path | None
    edited: bool
    leave_quickly = False  # run_wizard's App: quitting never waits for a thread worker
    _picked_run: Path | None  # the run shown because it is the preset's (none was chosen)
    served: list[Path]  # runs whose server this wizard started (the Monitor's Serve key)

    def on_load(self) -> None:
        if self.leave_quickly:
            asyncio.get_running_loop().set_default_executor(
                _NoWaitExecutor(thread_name_prefix="trainwiz-worker")
            )

    if TYPE_CHECKING:  # the App's own (tui.app.TrainwizApp)
        preset: Preset

        @property
        def current_step(self) -> str: ...

        def goto_step(self, step_id: str) -> bool: ...

    # ---- runs (screens.runs reads them; always in a thread) -----------------------------
    def with_runs(self, then: Callable[[list[Any]], None]) -> None:
        """Read the runs in a thread, then call ``then(rows)`` on the UI thread."""

        def read() -> None:
            from screens.runs import run_rows  # deferred: loads when first needed

            try:
                rows = run_rows()
            except Exception:  # an unreadable home: no runs known, nothing blocked
                rows = []
            self.call_from_thread(then, rows)

        self.run_worker(read, thread=True, exit_on_error=False, group="app-runs")

    # ---- the preset's run on the Monitor --------------------------------------------------
    def show_preset_run(self) -> None:
        """On start and when a preset is opened: unless a run was launched, attached or chosen,
        the Monitor shows this preset's live run, else its newest run that is over."""
        if self.current_run is None or self.current_run == self._picked_run:
            self.with_runs(self._show_preset_run)

    def _show_preset_run(self, rows: list[Any]) -> None:
        from screens.runs import live_runs, newest_ended_run  # deferred: loads when first needed

        if self.current_run is not None and self.current_run != self._picked_run:
            return  # launched, attached or chosen meanwhile: that one stays
        live = live_runs(rows, self.preset.name)
        row = live[0] if live else newest_ended_run(rows, self.preset.name)
        if row is None or row.run_dir == self.current_run:
            return
        self.current_run = self._picked_run = row.run_dir
        if live:
            self.notify(
                _("{preset} is training now: run {run}. The Monitor shows it (step 6).").format(
                    preset=self.preset.name, run=row.line()
                ),
                title=_("Live run found"),
                timeout=12,
            )
        monitor = self.screen if self.current_step == "monitor" else None
        follow = getattr(monitor, "follow_current_run", None)
        if callable(follow):  # on screen now: show it at once (else when next shown)
            self.call_later(follow)

    def on_serve_started(self, message: Any) -> None:
        """The Monitor's Serve key started (or found) a server: the quit dialog names it."""
        run_dir = getattr(message, "run_dir", None)
        if isinstance(run_dir, Path) and run_dir not in self.served:
            self.served.append(run_dir)

    def action_runs(self) -> None:
        from screens.runs import RunsScreen  # deferred: loads when first needed

        if isinstance(self.screen, RunsScreen):
            return

        def chosen(run_dir: Path | None) -> None:
            if run_dir is not None:
                self.current_run = run_dir
                if self.current_step != "monitor":
                    self.goto_step("monitor")

        self.push_screen(RunsScreen(), chosen)

    def live_run_warnings(self, rows: list[Any]) -> list[str]:
        """Warning lines for a launch while this preset already trains (asked, never silent)."""
        from screens.runs import live_runs  # deferred: loads when first needed

        return [
            _("{preset} is already training: {run}. Yes starts a second run beside it.").format(
                preset=self.preset.name, run=row.line()
            )
            for row in live_runs(rows, self.preset.name)
        ]

    async def action_quit(self) -> None:
        """Quit, asking first when edits are unsaved or runs keep going (they are detached)."""
        from screens.dialogs import ConfirmDialog  # deferred: loads when one is shown

        if isinstance(self.screen, ConfirmDialog) and getattr(self.screen, "is_quit", False):
            self.exit()
            return

        def ask(rows: list[Any], serves: list[Any]) -> None:
            from screens.runs import live_runs  # deferred: loads when first needed

            live = live_runs(rows)
            unsaved = self.edited
            if not live and not serves and not unsaved:
                self.exit()
                return
            keep = [_("keeps going: {run} (trainwiz stop {run_id} ends it)").format(
                run=row.line(), run_id=row.run_id) for row in live]  # fmt: skip
            keep += [serve.line() for serve in serves]  # servers this wizard started
            warnings = (
                [_("unsaved edits to {name}: Cancel, then ctrl+s saves them").format(
                    name=self.preset.name)]
                if unsaved else []
            )  # fmt: skip
            dialog = ConfirmDialog(
                _("Quit trainwiz?"),
                keep or [_("no run is going")],
                [_("runs and servers are detached: `trainwiz runs` lists the runs, `trainwiz "
                   "attach RUN` reopens one")] if keep else [],
                warnings,
                yes=N_("Quit"),
            )  # fmt: skip
            dialog.is_quit = True  # type: ignore[attr-defined]

            def answered(yes: bool | None) -> None:
                if yes:
                    self.exit()

            self.push_screen(dialog, answered)

        served = list(self.served)

        def read() -> None:
            from screens.runs import live_serves, run_rows  # deferred: loads when first needed

            try:
                rows = run_rows()
            except Exception:  # an unreadable home: no runs known, quitting is not blocked
                rows = []
            try:
                serves = live_serves(served)
            except Exception:  # /proc unreadable: no server known to be up
                serves = []
            self.call_from_thread(ask, rows, serves)

        self.run_worker(read, thread=True, exit_on_error=False, group="app-runs")

    def action_chat(self) -> None:
        """The Chat view on the run the Monitor shows (the palette's way in)."""
        from screens.chat import ChatScreen  # deferred: loads when chat opens

        if self.current_run is None:
            self.notify(_("No run yet: launch one, or open one with trainwiz attach RUN."),
                        title=_("Chat"), severity="warning")  # fmt: skip
            return
        if isinstance(self.screen, ChatScreen):
            return
        offer = self._chat_offer()
        if offer is not None and not offer.available:  # the Monitor's `a` refuses the same way
            from screens.run_actions import short_reason  # deferred: loads when a run is acted on

            self.notify(short_reason(offer, self.current_run.name, self.current_run),
                        title=_("Chat not available"), severity="warning", timeout=8)  # fmt: skip
            return
        self.push_screen(ChatScreen(self.current_run))

    def _chat_offer(self) -> Any:
        """The same offer the Monitor's Chat key follows (None when it cannot be read)."""
        if self.current_run is None:
            return None
        from backend.results.offers import run_offers  # deferred: loads when actions are asked

        try:
            return run_offers(self.current_run).chat
        except Exception:
            return None

    def chat_help(self) -> str:
        """The palette's help for Chat: says so when it is not available (as `a` is dimmed)."""
        if self.current_run is None:
            return _("not available: no run yet")
        offer = self._chat_offer()
        if offer is not None and not offer.available:
            from screens.run_actions import short_reason  # deferred: loads when a run is acted on

            return _("not available: {why}").format(
                why=short_reason(offer, self.current_run.name, self.current_run)
            )
        return _("the run on the Monitor")
