"""Step 1, Checks: what this machine has against what the preset needs, and how to fix the gaps.

Results appear as each check lands (the backend calls back from a thread worker and the screen
receives messages). A failure disables only the actions of the steps it names (each step opens with
its blockers shown); warnings never hold anything back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import OptionList, Static

from backend.checks import CHECKS, CheckResult, blocked_steps, run_checks
from backend.checks.model import Step
from backend.i18n import N_, _
from backend.steps import STEP_IDS
from screens.base import StepScreen
from widgets.check_list import MARKS, CheckList

NEXT_STEP = STEP_IDS[1]
STATUS_WORDS = {"ok": N_("ok"), "warn": N_("warn"), "fail": N_("fail"), "skip": N_("skip")}


class ChecksScreen(StepScreen):
    """Runs every check on arrival, shows details and the fix of the highlighted one."""

    STEP_ID = "checks"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "rerun", N_("Re-run"), id="checks.rerun"),
        Binding("c", "continue", N_("Continue"), id="checks.continue"),
    ]
    DEFAULT_CSS = """
    ChecksScreen #checks-status { height: auto; margin: 0 0 1 0; }
    ChecksScreen #checks-main { height: 1fr; }
    ChecksScreen #checks-list { width: 3fr; }
    ChecksScreen #checks-detail { width: 2fr; border: round $secondary 50%; padding: 0 1; }
    """

    @dataclass
    class Landed(Message):
        """One check finished (posted from the worker thread)."""

        result: CheckResult
        generation: int

    @dataclass
    class Finished(Message):
        results: list[CheckResult]
        generation: int

    @dataclass
    class BlockedChanged(Message):
        """Bubbles to the App after every run: which steps failures hold back (may be empty)."""

        blocked: dict[Step, list[str]]

    def __init__(self) -> None:
        super().__init__()
        self.results: list[CheckResult] = []
        self.running = False
        self._generation = 0
        self._cancel = threading.Event()

    def compose_body(self) -> ComposeResult:
        yield Static(id="checks-status")
        with Horizontal(id="checks-main"):
            yield CheckList(id="checks-list")
            with VerticalScroll(id="checks-detail"):
                yield Static(id="checks-detail-text")

    def on_mount(self) -> None:
        self.query_one(CheckList).focus()
        self.action_rerun()

    # ---- running -----------------------------------------------------------------------
    def action_rerun(self) -> None:
        self._cancel.set()  # a run still going is abandoned; its late messages are ignored
        self._cancel = threading.Event()
        self._generation += 1
        self.results = []
        self.running = True
        self.wizard.set_check_results([], complete=False)  # Launch says they run, offers nothing
        self.query_one(CheckList).show_pending([(s.id, s.title) for s in CHECKS])
        self._update_status()
        self._show_detail()
        self._run(self._generation, self._cancel)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checks")
    def _run(self, generation: int, cancel: threading.Event) -> None:
        results = run_checks(
            self.preset,
            on_result=lambda r: self.post_message(self.Landed(r, generation)),
            cancel=cancel,
        )
        self.post_message(self.Finished(results, generation))

    def on_checks_screen_landed(self, message: Landed) -> None:
        if message.generation != self._generation:
            return
        check_list = self.query_one(CheckList)
        check_list.land(message.result)
        self._update_status()
        if message.result.status == "fail" and message.result.blocks:
            # the steps it disables say so now, as "Disabled here" above does; in the checks'
            # own order, as the finished list gives them (a banner's first fix is the first's)
            landed = check_list.results
            ordered = [landed[spec.id] for spec in CHECKS if spec.id in landed]
            self.wizard.set_check_results(ordered, complete=False)
        highlighted = self.query_one(CheckList).highlighted_option
        if highlighted is not None and highlighted.id == message.result.id:
            self._show_detail()

    def on_checks_screen_finished(self, message: Finished) -> None:
        if message.generation != self._generation:
            return
        self.results = message.results
        self.running = False
        self._update_status()
        self._show_detail()
        self.wizard.set_check_results(message.results)
        self.post_message(self.BlockedChanged(blocked_steps(message.results)))

    def preset_changed(self) -> None:
        """Another preset means other needs: check again rather than rebuild the layout."""
        if self.is_mounted:
            self.action_rerun()

    def _app_preset_changed(self) -> None:
        """A newly opened preset comes without check results (the App drops the last preset's):
        check it now, even while another step is shown, so Launch waits for its own checks
        instead of offering l on the previous preset's. An edit keeps them until Checks shows."""
        if self.is_mounted and not self.is_current and self.wizard.machine.checks is None:
            self._preset_stale = False
            self.action_rerun()
            return
        super()._app_preset_changed()

    def language_changed(self) -> None:
        """Only the words change: repaint the status and the detail, keep the results."""
        self.query_one(CheckList).repaint()
        self._update_status()
        self._show_detail()
        self.show_blockers()

    # ---- display -----------------------------------------------------------------------
    @property
    def blocked(self) -> dict[Step, list[str]]:
        return blocked_steps(list(self.query_one(CheckList).results.values()))

    def _update_status(self) -> None:
        check_list = self.query_one(CheckList)
        counts = check_list.counts()
        text = Text()
        for status in ("ok", "warn", "fail", "skip"):
            mark, style = MARKS[status]
            text.append(f"{mark} {counts.get(status, 0)} {_(STATUS_WORDS[status])}   ", style=style)
        pending = len(CHECKS) - len(check_list.results)
        if self.running and pending:
            text.append(_("running… {pending} to go").format(pending=pending), style="italic")
        blocked = self.blocked
        text.append("\n")
        if blocked:
            parts = [
                _("{step} (by {checks})").format(step=name, checks=", ".join(ids))
                for name, ids in blocked.items()
            ]
            text.append(_("Disabled here: ") + "; ".join(parts), style="bold red")
            text.append(_(" — every step still opens to look and plan."), style="italic")
        elif not self.running:
            text.append(_("Nothing blocks the next steps. Press c to continue."), style="green")
        self.query_one("#checks-status", Static).update(text)

    @on(OptionList.OptionHighlighted, "#checks-list")
    def _highlighted(self) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        check_list = self.query_one(CheckList)
        option = check_list.highlighted_option
        target = self.query_one("#checks-detail-text", Static)
        if option is None:
            target.update("")
            return
        result = check_list.results.get(option.id or "")
        title = _(check_list.titles.get(option.id or "", option.id or ""))
        if result is None:
            target.update(Text(f"{title}\n\n" + _("running…"), style="dim"))
            return
        mark, style = MARKS[result.status]
        text = Text()
        text.append(f"{mark} {title}  ", style=style)
        text.append(
            f"{_(STATUS_WORDS[result.status])} · {result.duration_s:.2f} s\n\n", style="dim"
        )
        text.append(_(result.summary) + "\n")  # recorded English: translated if known
        if result.detail:
            text.append("\n" + result.detail + "\n", style="dim")
        if result.why:
            text.append("\n" + _("Why it matters") + "\n", style="bold")
            text.append(_(result.why) + "\n")  # a recorded English result: translated if known
        if result.fix:
            text.append("\n" + _("Fix") + "\n", style="bold")
            text.append(_(result.fix) + "\n", style="cyan")
        if result.blocks and result.status == "fail":
            steps = ", ".join(result.blocks)  # step ids: what --from/--until take
            text.append("\n" + _("Blocks: {steps}").format(steps=steps), style="bold red")
        target.update(text)

    # ---- moving on ---------------------------------------------------------------------
    def action_continue(self) -> None:
        """Blocked steps open too (with their blockers shown): blocked means "can't run"."""
        self.wizard.goto_step(NEXT_STEP)
