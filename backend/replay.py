"""Replay a preset: checks → model → environment → launch → follow, headless or from the wizard.

One pipeline serves `trainwiz replay` and the wizard's "run all": each step says whether it is
already satisfied (and is then skipped with a word), runs with progress and a cancel event, and
fails naming its step (``failed_step``), so a script knows where a replay stopped from its line
or its JSON; the exit code keeps the CLI's 0/1/2 rule. Nothing is asked here: the caller decides
what a warning means (``accept_warnings``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from backend.checks import run_checks
from backend.diagnosis.build_log import ensure_env_image
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.images import ensure_host_env
from backend.images.ready import environment_ready
from backend.preset.schema import Preset
from backend.rundir import LOG
from backend.steps import REPLAY_STAGES

# The stages are the step table's steps that replay runs (backend.steps), in its order.
STEP_ORDER = REPLAY_STAGES

Outcome = Literal["done", "skipped", "failed", "warned"]


@dataclass
class StepReport:
    step: str
    outcome: Outcome
    message: str
    details: list[str] = field(default_factory=list)


@dataclass
class ReplayResult:
    reports: list[StepReport]
    run_id: str | None = None
    run_dir: Path | None = None
    failed_step: str | None = None
    findings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 for a failed step, as every command's failure (0/1/2, docs/security.md): a code of
        its own per step would read as something else to a script that follows the rule; the
        step is named by ``failed_step``. Bad input never gets here: it raises BadInput (2)."""
        return 1 if self.failed_step else 0


Emit = Callable[[StepReport], None]
Progress = Callable[[str, str], None]  # (step, text)


class ReplayFailed(TrainwizError):
    def __init__(self, report: StepReport) -> None:
        super().__init__(report.message)
        self.report = report


def steps_between(start: str | None, until: str | None) -> list[str]:
    """The steps from ``start`` to ``until`` inclusive; BadInput names the valid ones."""
    for name, value in (("--from", start), ("--until", until)):
        if value is not None and value not in STEP_ORDER:
            raise BadInput(
                _("{name} {value}: unknown step; steps are {items}").format(
                    name=name, value=value, items=", ".join(STEP_ORDER)
                )
            )
    first = STEP_ORDER.index(start) if start else 0
    last = STEP_ORDER.index(until) if until else len(STEP_ORDER) - 1
    if first > last:
        raise BadInput(
            _("--from {start} comes after --until {until}: swap them").format(
                start=start, until=until
            )
        )
    return list(STEP_ORDER[first : last + 1])


@dataclass
class Replay:
    """The pipeline. ``detach`` stops after launch; ``accept_warnings`` lets warnings pass."""

    preset: Preset
    accept_warnings: bool = False
    detach: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    progress: Progress | None = None
    run_dir: Path | None = None
    confirm: Callable[[str], bool] | None = None  # asked about warnings (a terminal only)
    ignore_plan: bool = False  # launch even when the plan predicts it does not fit (--ignore-plan)
    ref: str | None = None  # the preset as the user named it, for a refusal's fix

    def _say(self, step: str, text: str) -> None:
        if self.progress is not None:
            self.progress(step, text)

    # ---- steps -----------------------------------------------------------------------------
    def step_checks(self) -> StepReport:
        results = run_checks(self.preset, None, self.cancel)
        failed = [r for r in results if r.status == "fail" and r.blocks]
        warned = [r for r in results if r.status == "warn"]
        details = [f"{r.status:4} {r.id}: {r.summary}" for r in results]
        if failed:
            fixes = [f"{r.id}: {r.summary} — fix: {r.fix}" for r in failed]
            raise ReplayFailed(StepReport("checks", "failed", "checks failed", fixes))
        text = "; ".join(f"{r.id}: {r.summary}" for r in warned)
        accepted = self.accept_warnings or (self.confirm is not None and self.confirm(text))
        if warned and not accepted:
            raise ReplayFailed(
                StepReport("checks", "failed", f"warnings need --yes to continue: {text}", details)
            )
        outcome: Outcome = "warned" if warned else "done"
        return StepReport(
            "checks", outcome, f"{len(results)} checks, {len(warned)} warnings", details
        )

    def step_model(self) -> StepReport:
        from backend.model.fetch import (  # deferred: `--help` skips the model clients
            ensure_model,
            model_dir,
        )

        source = self.preset.model
        target = model_dir(source)
        if self._model_satisfied(target):
            return StepReport("model", "skipped", f"model valid at {target}")

        def on_progress(event: object) -> None:
            text = getattr(event, "text", None) or str(event)
            self._say("model", text)

        try:
            result = ensure_model(source, progress=on_progress, cancel=self.cancel)
        except (TrainwizError, OSError) as exc:
            raise ReplayFailed(StepReport("model", "failed", f"model: {exc}")) from exc
        report = result.report
        if report.problems:
            raise ReplayFailed(
                StepReport(
                    "model", "failed", f"model at {result.dir} is not usable", report.problems
                )
            )
        return StepReport("model", "done", f"model {result.action} at {result.dir}")

    def _model_satisfied(self, target: Path) -> bool:
        from backend.model.ready import model_ready  # deferred: `--help` skips the model clients

        return model_ready(self.preset).ready

    def step_environment(self) -> StepReport:
        if environment_ready(self.preset):
            what = "environment image" if self.preset.launch.runner == "docker" else "training env"
            return StepReport("environment", "skipped", f"{what} present")
        try:
            if self.preset.launch.runner == "docker":
                tag = ensure_env_image(
                    self.preset,
                    progress=lambda *a: self._say("environment", " ".join(map(str, a))),
                    cancel=self.cancel,
                )
                return StepReport("environment", "done", f"environment image {tag}")

            venv = ensure_host_env(self.preset, cancel=self.cancel)
            return StepReport("environment", "done", f"training venv {venv}")
        except (TrainwizError, OSError) as exc:
            raise ReplayFailed(StepReport("environment", "failed", f"environment: {exc}")) from exc

    def step_launch(self) -> StepReport:
        from backend.runs.launch import launch  # deferred: launcher + monitor, ~46 modules

        try:
            result = launch(self.preset, prepare=True, ignore_plan=self.ignore_plan, ref=self.ref)
        except BadInput:
            raise
        except (TrainwizError, OSError) as exc:
            raise ReplayFailed(StepReport("launch", "failed", f"launch: {exc}")) from exc
        self.run_dir = result.run_dir
        return StepReport("launch", "done", f"run {result.run_id} started ({result.status.state})")

    def step_follow(self) -> StepReport:
        from backend.runs import follow_log, refresh  # deferred: launcher + monitor, ~46 modules

        if self.run_dir is None:
            raise BadInput(
                _("--from follow needs a run: launch first (or use 'trainwiz attach RUN')")
            )
        for chunk in follow_log(self.run_dir, cancel=self.cancel):
            for line in chunk.splitlines():
                self._say("follow", line)
        status = refresh(self.run_dir)
        if status.state != "finished":
            raise ReplayFailed(
                StepReport(
                    "follow",
                    "failed",
                    f"run {self.run_dir.name} ended {status.state} (exit {status.exit_code})",
                )
            )
        return StepReport("follow", "done", f"run {self.run_dir.name} finished")

    # ---- driver ----------------------------------------------------------------------------
    def run(self, steps: list[str] | None = None, emit: Emit | None = None) -> ReplayResult:
        chosen = steps or list(STEP_ORDER)
        if self.detach and "follow" in chosen:
            chosen.remove("follow")
        reports: list[StepReport] = []
        result = ReplayResult(reports)
        for name in chosen:
            if self.cancel.is_set():
                break
            try:
                report = getattr(self, f"step_{name}")()
            except ReplayFailed as failure:
                reports.append(failure.report)
                if emit:
                    emit(failure.report)
                result.failed_step = name
                result.findings = self._findings()
                break
            reports.append(report)
            if emit:
                emit(report)
        if self.run_dir is not None:
            result.run_dir = self.run_dir
            result.run_id = self.run_dir.name
        return result

    def _findings(self) -> list[str]:
        """Diagnosis of the run's log, when a run got far enough to have one."""
        if self.run_dir is None or not (self.run_dir / LOG).is_file():
            return []
        from backend.diagnosis import diagnose_file  # deferred: classifier tables, only on failure

        diagnosis = diagnose_file(self.run_dir / LOG)
        return [
            f"line {f.line}: [{f.severity}] {f.title} — {f.fixes[0].title if f.fixes else f.explanation}"
            for f in diagnosis.findings
        ]
