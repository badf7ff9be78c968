"""The Monitor's actions on the run it shows: Resume (a failed or stopped run with a complete
checkpoint) and Chat (a run that ended with a model).

Both are always on screen, disabled with the reason when they do not apply (the CLI's own
refusal: ``backend.results.offers``), so a user never wonders where Resume went. Resume asks first
(``ConfirmDialog``: what runs, where, from which checkpoint), then ``backend.runs.resume`` runs in
a thread worker; the Monitor keeps following the same run directory, so the new attempt's log
and steps simply continue on screen. The offers are recomputed whenever the run's status changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Button, Static

from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _
from backend.results.offers import Offer, RunOffers, run_offers
from screens.dialogs import ConfirmDialog


def short_reason(offer: Offer, run_id: str, run_dir: Path | None = None) -> str:
    """The refusal without what the Monitor already shows: the run id, the run's directory."""
    reason = offer.reason
    prefix = f"run {run_id}: "
    reason = reason[len(prefix) :] if reason.startswith(prefix) else reason
    return reason.replace(f"{run_dir}/", "") if run_dir is not None else reason


def resume_dialog(offers: RunOffers, run_dir: Path) -> ConfirmDialog:
    """What a resume runs and where, said before anything starts."""
    step = offers.resume.checkpoint
    runs = [
        _("attempt {n}: the run's launch.json again (runner {runner}, detached)").format(
            n=offers.attempt + 1, runner=offers.runner
        ),
        _(
            "training continues at step {step}: weights, optimizer, scheduler, RNG and data "
            "order from the checkpoint; metrics continue the same series"
        ).format(step=step),
    ]
    where = [
        _("run directory: {dir}").format(dir=run_dir),
        _("from: {path}").format(path=offers.resume.path),
    ]
    return ConfirmDialog(
        _("Resume run {run} from checkpoint-{step}?").format(run=offers.run_id, step=step),
        runs,
        where,
        yes=N_("Resume"),
    )


class RunActions(Horizontal):
    """``[Resume (r)] [Chat (a)]`` and a line saying what each will do, or why it cannot."""

    DEFAULT_CSS = """
    RunActions { height: auto; padding: 0 1; }
    RunActions Button { margin: 0 1 0 0; }
    RunActions Button { min-width: 0; }
    RunActions #run-actions-note { width: 1fr; height: 1; text-wrap: nowrap;
        text-overflow: ellipsis; color: $text-muted; }
    """

    @dataclass
    class OffersReady(Message):
        offers: RunOffers

    @dataclass
    class Resumed(Message):
        record: dict[str, object] | None
        error: str | None

    def __init__(self, run_dir: Path, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run_dir = run_dir
        self.offers: RunOffers | None = None
        self.resuming = False

    def compose(self) -> ComposeResult:
        yield Button(_("Resume (r)"), id="run-resume", compact=True, disabled=True)
        yield Button(_("Chat (a)"), id="run-chat", compact=True, disabled=True)
        yield Static(Text(_("checking the run…"), style="italic"), id="run-actions-note")

    def on_mount(self) -> None:
        self.refresh_offers()

    # ---- offers (a thread worker: they read the run's files and /proc) -------------------
    def refresh_offers(self) -> None:
        self._offers_worker()

    @work(thread=True, exclusive=True, exit_on_error=False, group="run-offers")
    def _offers_worker(self) -> None:
        self.post_message(self.OffersReady(run_offers(self.run_dir)))

    def on_run_actions_offers_ready(self, message: OffersReady) -> None:
        self.offers = offers = message.offers
        resume = self.query_one("#run-resume", Button)
        chat = self.query_one("#run-chat", Button)
        resume.disabled = self.resuming or not offers.resume.available
        chat.disabled = not offers.chat.available
        resume.tooltip = offers.resume.reason
        chat.tooltip = offers.chat.reason
        self.query_one("#run-actions-note", Static).update(self.note_text(offers))
        self.screen.refresh_bindings()  # the footer dims r / a with the buttons
        if getattr(self.app, "resume_requested", None) == self.run_dir:  # from Troubleshoot
            self.app.resume_requested = None  # type: ignore[attr-defined]
            self.request_resume()

    def note_text(self, offers: RunOffers) -> Text:
        """One line: the attempt after a resume, then what can be done, then what cannot and
        why (so on a narrow terminal the cut-off part is the least useful)."""
        parts: list[tuple[str, str, str]] = []
        if offers.attempt > 1:
            what = _("attempt {n}").format(n=offers.attempt)
            if offers.resumed_from is not None:
                what += " " + _("(from checkpoint-{step})").format(step=offers.resumed_from)
            parts.append((what, "", "bold"))
        pairs = ((_("Resume"), offers.resume), (_("Chat"), offers.chat))
        for label, offer in sorted(pairs, key=lambda pair: not pair[1].available):
            mark = "✓" if offer.available else "✗"
            reason = short_reason(offer, offers.run_id, self.run_dir)
            parts.append((f"{mark} {label}: ", reason, "green" if offer.available else "yellow"))
        text = Text()
        for number, (head, tail, style) in enumerate(parts):
            if number:
                text.append(" · ", style="dim")
            text.append(head, style=style)
            text.append(tail)
        return text

    def available(self, action: str) -> bool:
        if self.offers is None:
            return False
        if action == "resume":
            return self.offers.resume.available and not self.resuming
        return self.offers.chat.available

    # ---- resume --------------------------------------------------------------------------
    def request_resume(self) -> None:
        offers = self.offers
        if self.resuming:
            return
        if offers is None or not offers.resume.available:
            why = short_reason(offers.resume, offers.run_id) if offers else _("checking the run…")
            self.notify(why, title=_("Resume not available"), severity="warning", timeout=8)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.resuming = True
                self.query_one("#run-resume", Button).disabled = True
                self.screen.refresh_bindings()
                self._resume_worker()

        self.app.push_screen(resume_dialog(offers, self.run_dir), answered)

    @work(thread=True, exclusive=True, exit_on_error=False, group="run-resume")
    def _resume_worker(self) -> None:
        from backend.runs.resume import resume  # deferred: worker thread, not at monitor open

        try:
            record = resume(self.run_dir)
        except BadInput as exc:
            self.post_message(self.Resumed(None, "\n".join(exc.problems)))
            return
        except TrainwizError as exc:
            self.post_message(self.Resumed(None, str(exc)))
            return
        self.post_message(self.Resumed(dict(record), None))

    def on_run_actions_resumed(self, message: Resumed) -> None:
        self.resuming = False
        if message.record is None:
            self.notify(str(message.error), title=_("Resume refused"), severity="error", timeout=10)
        else:
            self.notify(
                _("Attempt {n} started from checkpoint-{step}.").format(
                    n=message.record.get("attempt"), step=message.record.get("resumed_from")
                ),
                title=_("Resume"),
            )
        self.refresh_offers()

    # ---- chat ----------------------------------------------------------------------------
    def open_chat(self) -> None:
        offers = self.offers
        if offers is None or not offers.chat.available:
            why = short_reason(offers.chat, offers.run_id) if offers else _("checking the run…")
            self.notify(why, title=_("Chat not available"), severity="warning", timeout=8)
            return
        from screens.chat import ChatScreen  # deferred: loads when chat opens

        self.app.push_screen(ChatScreen(self.run_dir))

    @on(Button.Pressed, "#run-resume")
    def _resume_pressed(self) -> None:
        self.request_resume()

    @on(Button.Pressed, "#run-chat")
    def _chat_pressed(self) -> None:
        self.open_chat()
