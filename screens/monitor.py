"""Monitor step: GPUs, throughput, loss and the flagged log of one run, live or finished.

Three thread workers feed it (GPU sampler, log follower, metrics follower); each posts small
messages and never touches widgets. Snapshot-like messages replace older queued ones, so a
slow terminal (SSH) drops stale frames instead of falling behind.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import Static

from backend.i18n import N_, _
from backend.monitor import (
    ClassifiedBatch,
    GpuSnapshot,
    GpuSource,
    HfLogParser,
    LogBatch,
    LogFollower,
    MetricsFollower,
    MetricsView,
    NvmlSampler,
    NvmlSource,
    RunFiles,
    RunTracker,
    classify_batch,
    owner_for_status,
)
from backend.monitor.logmodel import load_classifier
from backend.monitor.nodegpu import NodeGpuSource, is_node_run
from backend.monitor.owner import OwnerResolver
from backend.monitor.world import planned_world, world_note
from backend.rundir import FINAL_STATES
from screens.base import StepBody, StepScreen
from screens.queue import FollowsQueue
from screens.run_actions import RunActions
from widgets.gpu_panel import GpuPanel
from widgets.log_pane import LogPane, OpenTroubleshoot
from widgets.loss_chart import LossChart
from widgets.run_header import RunHeader
from widgets.throughput import ThroughputMeter

GpuSourceFactory = Callable[[OwnerResolver], GpuSource]


class GpuUpdate(Message):
    def __init__(self, snapshot: GpuSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, GpuUpdate)


class MetricsUpdate(Message):
    def __init__(self, view: MetricsView, source: str) -> None:
        super().__init__()
        self.view = view
        self.source = source

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, MetricsUpdate) and message.source == self.source


class StatusUpdate(Message):
    def __init__(self, status: dict[str, Any]) -> None:
        super().__init__()
        self.status = status


class LogUpdate(Message):
    def __init__(self, batch: ClassifiedBatch) -> None:
        super().__init__()
        self.batch = batch


class ServeStarted(Message):
    """Bubbles to the App: a server of ``run_dir`` is up (the quit dialog names it)."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__()
        self.run_dir = run_dir


def _ended_at(status: dict[str, Any] | None) -> float | None:
    """When a final run ended (status.json), so "ran" is its length, not the time since."""
    if not status or status.get("state") not in FINAL_STATES:
        return None
    ended = status.get("ended_at")
    return float(ended) if isinstance(ended, (int, float)) else None


class MonitorScreen(FollowsQueue, StepScreen):  # FollowsQueue: the Queue view's f
    STEP_ID = "monitor"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("z", "zoom", N_("Zoom"), id="monitor.zoom"),
        Binding("g", "focus_gpus", N_("GPUs"), id="monitor.focus_gpus", show=False),
        Binding("l", "focus_log", N_("Log"), id="monitor.focus_log", show=False),
        Binding("c", "focus_chart", N_("Chart"), id="monitor.focus_chart", show=False),
        Binding("r", "resume", N_("Resume"), id="monitor.resume"),
        Binding("a", "chat", N_("Chat"), id="monitor.chat"),
        Binding("v", "serve", N_("Serve"), id="monitor.serve"),
        Binding("u", "runs", N_("Runs"), id="monitor.runs"),
    ]
    DEFAULT_CSS = """
    MonitorScreen #monitor-middle { height: 1fr; min-height: 7; }
    MonitorScreen #monitor-none { color: $warning; margin: 1 0; }
    MonitorScreen GpuPanel { border-bottom: none; }
    """

    def __init__(
        self,
        run_dir: Path | None = None,
        *,
        gpu_source: GpuSourceFactory | None = None,
        gpu_interval: float = 1.0,
        follow: bool = True,
    ) -> None:
        super().__init__()
        self._run_dir = run_dir
        self._gpu_factory = gpu_source
        self.gpu_interval = gpu_interval
        self.follow_files = follow
        self._cancel = threading.Event()
        self._metrics_seen = False
        self.chart_width = 80
        self.run: RunFiles | None = None

    def _resolve_run(self) -> RunFiles | None:
        run_dir = self._run_dir or getattr(self.app, "current_run", None)
        return RunFiles(Path(run_dir)) if run_dir else None

    def compose_body(self) -> ComposeResult:
        self.run = self._resolve_run()
        yield GpuPanel(id="gpus")
        if self.run is None:
            yield Static(
                _(
                    "No run to monitor: launch one in the Launch step, or press u to pick one "
                    "of this machine's runs."
                ),
                id="monitor-none",
            )
            return
        yield RunHeader(self.run.run_id, id="monitor-run")
        with Horizontal(id="monitor-middle"):
            yield LossChart(id="loss")
            yield ThroughputMeter(id="throughput")
        yield RunActions(self.run.run_dir, id="run-actions")
        yield LogPane(run_id=self.run.run_id, log_path=self.run.log, id="log")

    def on_mount(self) -> None:
        self._start_workers()

    def _start_workers(self) -> None:
        status = self.run.status() if self.run else None
        self._gpu_worker(owner_for_status(status))
        if self.run is not None:
            self._log_worker(self.run)
            self._metrics_worker(self.run)
            self.query_one(LogPane).view.focus()

    async def on_screen_resume(self) -> None:
        """A launch (or attach) since the last visit: monitor that run instead."""
        await self.follow_current_run()

    async def follow_current_run(self) -> None:
        """Show the App's current run if it is not the one shown (the App calls this when it
        finds the preset's run while the Monitor is on screen)."""
        new = self._resolve_run()
        if new is None or (self.run is not None and new.run_dir == self.run.run_dir):
            return
        self._cancel.set()
        self._cancel = threading.Event()
        self._metrics_seen = False
        await self.query_one(StepBody).recompose()  # the frame (header, step bar) stays
        self._start_workers()

    def preset_changed(self) -> None:
        """The monitor shows a run, not the preset: loading a preset changes nothing here."""

    def on_unmount(self) -> None:
        self._cancel.set()

    def on_resize(self) -> None:
        if self.run is not None:
            self.chart_width = self.query_one(LossChart).plot_width

    # ---- workers (threads: call backend, post messages, never touch widgets) ---------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="monitor-gpu")
    def _gpu_worker(self, owner: OwnerResolver) -> None:
        cancel = self._cancel  # this worker's own: a later restart swaps in a fresh event
        run = self.run
        if self._gpu_factory:
            source = self._gpu_factory(owner)
        elif run is not None and is_node_run(run.run_dir, run.status()):
            source = NodeGpuSource(run.run_dir)  # every node's sampler, over the shared FS
        else:
            source = NvmlSource(owner)

        def on_sample(snap: GpuSnapshot) -> None:
            self.post_message(GpuUpdate(snap))

        sampler = NvmlSampler(source, on_sample, self.gpu_interval)
        try:
            sampler.run(cancel)
        finally:
            source.close()

    @work(thread=True, exclusive=True, exit_on_error=False, group="monitor-log")
    def _log_worker(self, run: RunFiles) -> None:
        cancel = self._cancel
        classifier = load_classifier()
        if classifier is None:
            self.post_message(StatusUpdate({"_classifier_missing": True}))
        state = {"parser": HfLogParser(), "tracker": RunTracker(source="log")}
        last_post = 0.0

        def on_batch(batch: LogBatch) -> None:
            nonlocal last_post
            self.post_message(LogUpdate(classify_batch(batch, classifier)))
            if self._metrics_seen:
                return
            if batch.reset:  # the log restarted: so does what it told us
                state.update(parser=HfLogParser(), tracker=RunTracker(source="log"))
            parser, tracker = state["parser"], state["tracker"]
            assert isinstance(parser, HfLogParser) and isinstance(tracker, RunTracker)
            for seg in batch.lines:
                tracker.update(parser.feed(seg))
            now = time.monotonic()
            if tracker.last is not None and (batch.eof or now - last_post > 0.5):
                last_post = now
                self.post_message(MetricsUpdate(tracker.view(self.chart_width), "log"))

        LogFollower(run.log, on_batch).run(cancel, follow=self.follow_files)

    @work(thread=True, exclusive=True, exit_on_error=False, group="monitor-metrics")
    def _metrics_worker(self, run: RunFiles) -> None:
        cancel = self._cancel
        follower = MetricsFollower(run.metrics)
        tracker = RunTracker(source="metrics")
        last_status: dict[str, Any] | None = None
        planned = planned_world(run.run_dir)  # the trainer's world size vs the plan's
        said: tuple[str, int | None] = ("", None)
        while True:
            status = run.status()
            ended_at = _ended_at(status)  # a run that ended without an end line stops its clock
            events = follower.poll()
            world = tracker.start.world_size if tracker.start else None  # its start record's
            note = world_note(world, planned)
            if status is not None and (status != last_status or (note, world) != said):
                last_status, said = status, (note, world)
                self.post_message(StatusUpdate({**status, "_world_note": note,
                                                "_world_size": world}))  # fmt: skip
                if ended_at is not None and tracker.last is not None and not events:
                    view = tracker.view(self.chart_width, now=ended_at)
                    self.post_message(MetricsUpdate(view, "metrics"))
            if events:
                tracker.update(events)
                if tracker.last is not None or tracker.end is not None:
                    self._metrics_seen = True
                    view = tracker.view(self.chart_width, now=ended_at)
                    self.post_message(MetricsUpdate(view, "metrics"))
            if follower.behind and not cancel.is_set():
                continue  # catching up with a long file: next slice now
            if cancel.wait(0.25) or not self.follow_files:
                return

    # ---- message handlers (UI thread) -----------------------------------------------------
    def on_gpu_update(self, message: GpuUpdate) -> None:
        self.query_one(GpuPanel).show(message.snapshot)

    def on_log_update(self, message: LogUpdate) -> None:
        self.query_one(LogPane).add_batch(message.batch)

    def on_metrics_update(self, message: MetricsUpdate) -> None:
        if message.source == "log" and self._metrics_seen:
            return
        self.query_one(LossChart).show(message.view)
        self.query_one(ThroughputMeter).show(message.view.summary)

    def on_status_update(self, message: StatusUpdate) -> None:
        if message.status.get("_classifier_missing"):
            pane = self.query_one(LogPane)
            pane.classifier_missing = True
            return
        state = str(message.status.get("state") or "")
        fallback = str(message.status.get("fallback") or "")  # OOM fallback (runs/fallback)
        world = str(message.status.get("_world_note") or "")  # world size not the plan's
        note = "\n".join(x for x in (fallback, world) if x)
        self.query_one(ThroughputMeter).show(None, state, note)
        size = message.status.get("_world_size")
        self.query_one(RunHeader).show(state, str(message.status.get("preset") or ""),
                                       size if isinstance(size, int) else None)  # fmt: skip
        self.query_one(RunActions).refresh_offers()  # resume / chat follow the run's state

    def on_open_troubleshoot(self, message: OpenTroubleshoot) -> None:
        """The app owns the Troubleshoot view; until it handles this message, open it plainly."""
        handler = getattr(self.app, "on_open_troubleshoot", None)
        fallback = getattr(self.app, "action_troubleshoot", None)
        if handler is None and callable(fallback):
            fallback()

    # ---- actions ----------------------------------------------------------------------------
    def action_zoom(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        target: Any = self.focused
        while target is not None and not isinstance(target, (LogPane, LossChart, GpuPanel)):
            target = target.parent
        if target is None:
            target = self.query_one(LogPane) if self.run is not None else self.query_one(GpuPanel)
        self.maximize(target, container=False)

    def action_focus_log(self) -> None:
        if self.run is not None:
            self.query_one(LogPane).view.focus()

    def action_focus_chart(self) -> None:
        if self.run is not None:
            self.query_one(LossChart).focus()

    def action_focus_gpus(self) -> None:
        self.query_one(GpuPanel).focus()

    # Resume and Chat: shown for every run, dimmed in the footer while they do not apply
    # (the actions bar says why); the flows live in screens/run_actions.py.
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("resume", "chat", "serve"):
            bars = self.query(RunActions)
            if self.run is None or not bars:
                return False if self.run is None else None
            # Serve loads the model chat would (the bar's Chat reason says why not).
            return True if bars.first().available(action.replace("serve", "chat")) else None
        return True

    def action_serve(self) -> None:
        """``trainwiz serve RUN --detach`` from the Monitor (backend.results.serve)."""
        if self.run is not None:
            self.notify(_("Starting the API server for this run's model…"), title=_("Serve"))
            self._serve_worker(self.run.run_dir)

    @work(thread=True, exclusive=True, exit_on_error=False, group="monitor-serve")
    def _serve_worker(self, run_dir: Path) -> None:
        from backend.results.serve_run import (  # deferred: serving, only when it is asked for
            serve_in_background,
        )

        severity, text = serve_in_background(run_dir)
        if severity != "error":  # up (started now or already): the App remembers it for quit
            self.post_message(ServeStarted(run_dir))
        self.app.call_from_thread(self.notify, text, title=_("Serve"), severity=severity)

    def action_runs(self) -> None:
        """Every run on this machine (the App's Runs view; Enter shows one here)."""
        show = getattr(self.app, "action_runs", None)
        if callable(show):
            show()

    def action_resume(self) -> None:
        if self.run is not None:
            self.query_one(RunActions).request_resume()

    def action_chat(self) -> None:
        if self.run is not None:
            self.query_one(RunActions).open_chat()
