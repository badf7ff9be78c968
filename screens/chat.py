"""Chat view: talk to a run's model, as ``trainwiz chat RUN`` does, inside the wizard.

The model lives in ``backend.results.chat.ChatSession``'s worker process (the training side's
python: the wizard never imports torch). One thread worker owns the session for the life of the
view: it loads the model (the view says "loading model…" with the seconds waited), then answers
the prompts the view queues, one at a time. Closing the view (Escape, or the app quitting) sets
the session's cancel event: the worker process is killed while it loads or generates, so no
model is left running in the background.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Input, Static

from backend.errors import BadInput, TrainwizError
from backend.i18n import N_, _
from backend.rundir import read_status
from widgets.footer import TranslatedFooter


class ChatScreen(Screen[None]):
    """A transcript, a status line and a prompt input for one run's model."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", N_("Close chat"), id="chat.close"),
    ]
    DEFAULT_CSS = """
    ChatScreen #chat-title { height: auto; padding: 0 1; }
    ChatScreen #chat-transcript { height: 1fr; border: round $secondary 50%; padding: 0 1; }
    ChatScreen .chat-turn { height: auto; margin: 0 0 1 0; }
    ChatScreen #chat-status { height: auto; padding: 0 1; color: $text-muted; }
    ChatScreen #chat-status.error { color: $error; }
    """

    @dataclass
    class Progress(Message):
        seconds: float

        def can_replace(self, message: Message) -> bool:
            return isinstance(message, ChatScreen.Progress)

    @dataclass
    class Ready(Message):
        model: str
        device: str
        seconds: float

    @dataclass
    class Reply(Message):
        prompt: str
        reply: str
        seconds: float

    @dataclass
    class Failed(Message):
        error: str

    def __init__(self, run_dir: Path, *, checkpoint: int | None = None,
                 max_new_tokens: int = 128) -> None:  # fmt: skip
        super().__init__()
        self.run_dir = Path(run_dir)
        self.checkpoint = checkpoint
        self.max_new_tokens = max_new_tokens
        self.cancel = threading.Event()
        self._prompts: queue.Queue[str | None] = queue.Queue()
        self.ready = False
        self.waiting = False  # a prompt was sent and its reply has not come back
        self.failed: str | None = None
        self.replies: list[str] = []

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(
            Text(_("Chat with run {run}").format(run=self.run_dir.name), style="bold"),
            id="chat-title",
        )
        yield VerticalScroll(id="chat-transcript")
        yield Static(Text(_("loading model…"), style="italic"), id="chat-status")
        yield Input(placeholder=_("Type a prompt, then Enter (Escape closes)"), id="chat-input")
        yield TranslatedFooter()

    def on_mount(self) -> None:
        self.query_one("#chat-input", Input).focus()
        self._session_worker()

    def on_unmount(self) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the model worker (killed within ~0.1 s) and end the session thread."""
        self.cancel.set()
        self._prompts.put(None)

    # ---- the session (a thread worker owns it; it only posts messages) ---------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="chat-session")
    def _session_worker(self) -> None:
        from backend.results.chat import (  # deferred: worker thread, not at screen open
            ChatCancelled,
            ChatSession,
        )

        cancel = self.cancel
        started = time.monotonic()
        if self.checkpoint is None:  # the Monitor's rule, for the palette's way in too
            from backend.results.offers import (  # deferred: worker thread, not at screen open
                chat_offer,
            )

            try:
                offer = chat_offer(self.run_dir, read_status(self.run_dir).state)
            except (TrainwizError, OSError, ValueError) as exc:
                self.post_message(self.Failed(str(exc)))
                return
            if not offer.available:
                self.post_message(self.Failed(offer.reason))
                return
        try:
            session = ChatSession(
                self.run_dir,
                checkpoint=self.checkpoint,
                device="auto",
                max_new_tokens=self.max_new_tokens,
                cancel=cancel,
                progress=self._loading,
            )
        except ChatCancelled:
            return
        except BadInput as exc:
            self.post_message(self.Failed("\n".join(exc.problems)))
            return
        except TrainwizError as exc:
            self.post_message(self.Failed(str(exc)))
            return
        with session:
            self.post_message(
                self.Ready(str(session.model), session.device, time.monotonic() - started)
            )
            while not cancel.is_set():
                prompt = self._prompts.get()
                if prompt is None:
                    return
                asked = time.monotonic()
                try:
                    reply = session.ask(prompt)
                except ChatCancelled:
                    return
                except TrainwizError as exc:
                    self.post_message(self.Failed(str(exc)))
                    return
                self.post_message(self.Reply(prompt, reply, time.monotonic() - asked))

    def _loading(self, seconds: float) -> None:
        self.post_message(self.Progress(seconds))

    # ---- messages (UI thread) --------------------------------------------------------------
    def _status(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#chat-status", Static)
        status.set_class(error, "error")
        status.update(Text(text))

    def on_chat_screen_progress(self, message: Progress) -> None:
        if not self.ready and self.failed is None:
            self._status(_("loading model… {s:.0f} s").format(s=message.seconds))

    def on_chat_screen_ready(self, message: Ready) -> None:
        self.ready = True
        self.query_one("#chat-title", Static).update(
            Text(_("Chat with run {run}").format(run=self.run_dir.name), style="bold")
            + Text("  " + _("model {path} on {device}").format(
                path=message.model, device=message.device), style="dim")
        )  # fmt: skip
        self._status(
            _("model loaded in {s:.1f} s (FastChat's vicuna template, greedy)").format(
                s=message.seconds
            )
        )
        if self.waiting:
            self._status(_("thinking…"))

    def on_chat_screen_reply(self, message: Reply) -> None:
        self.waiting = False
        self.replies.append(message.reply)
        self._add_turn(_("model"), message.reply or _("(an empty reply)"), "green")
        self._status(_("replied in {s:.1f} s").format(s=message.seconds))
        self.query_one("#chat-input", Input).disabled = False
        self.query_one("#chat-input", Input).focus()

    def on_chat_screen_failed(self, message: Failed) -> None:
        self.failed = message.error
        self.waiting = False
        self._status(_("Chat failed: {error}").format(error=message.error), error=True)
        self.query_one("#chat-input", Input).disabled = True

    def _add_turn(self, who: str, text: str, style: str) -> None:
        line = Text()
        line.append(f"{who}> ", style=f"bold {style}")
        line.append(text)
        transcript = self.query_one("#chat-transcript", VerticalScroll)
        transcript.mount(Static(line, classes="chat-turn"))
        transcript.scroll_end(animate=False)

    @on(Input.Submitted, "#chat-input")
    def _submitted(self, event: Input.Submitted) -> None:
        prompt = event.value.strip()
        if not prompt or self.waiting or self.failed is not None:
            return
        event.input.value = ""
        event.input.disabled = True
        self.waiting = True
        self._add_turn(_("you"), prompt, "cyan")
        self._status(_("thinking…") if self.ready else _("loading model…"))
        self._prompts.put(prompt)

    def action_close(self) -> None:
        self.stop()
        self.dismiss(None)
