"""The plan's shared types: one step (its argv, env, where it runs) and the plan of a preset.

A leaf module: every plan builder, the launch spec and the screens import these, and it imports
nothing above ``backend.redact``/``backend.i18n``. ``PlanStep.display()`` is the shell-quoted
form of exactly the argv and env the step runs with, secrets redacted.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from backend.i18n import _
from backend.redact import redact_argv, redact_data, redact_env, redact_text

Where = Literal["host", "container"]


@dataclass
class PlanStep:
    """One command. ``exec_prefix`` is how a container step is entered (docker exec ...)."""

    id: str
    group: str
    title: str
    argv: list[str]
    where: Where = "host"
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    exec_prefix: list[str] = field(default_factory=list)
    docker: dict[str, Any] | None = None
    # Set when another step runs this one (the container's command, each node's agent): the
    # script shows it as a comment, so running the printed plan runs it once, as a launch does.
    included_in: str = ""

    def full_argv(self) -> list[str]:
        return [*self.exec_prefix, *self.argv]

    def display(self) -> str:
        """One shell command line for any values: every word quoted, secrets redacted.

        A key that is not a shell name cannot be an assignment, so then ``env`` sets them.
        """
        if self._env_in_exec():
            return " ".join(shell_word(a) for a in redact_argv(self.shown_argv()))
        env = redact_env(self.env)
        words = [shell_word(a) for a in redact_argv(self.full_argv())]
        if all(_SHELL_NAME.fullmatch(k) for k in env):
            prefix = [f"{k}={shell_word(v)}" for k, v in env.items()]
        else:
            prefix = ["env", *(shell_word(f"{k}={v}") for k, v in env.items())]
        return " ".join([*prefix, *words])

    def _env_in_exec(self) -> bool:
        return bool(self.env) and self.exec_prefix[:2] == ["docker", "exec"]

    def shown_argv(self) -> list[str]:
        """The command :meth:`display` prints, unredacted. A step run inside the container gets
        its environment there (``docker exec -e K=V``), not on the host's docker client: the
        printed line must do what the runner does."""
        full = self.full_argv()
        if not self._env_in_exec():
            return full
        flags = [w for k, v in self.env.items() for w in ("-e", f"{k}={v}")]
        return [*full[:2], *flags, *full[2:]]

    def redacted(self) -> dict[str, Any]:
        """The step as plan.json / ``plan --json`` show it: secrets redacted."""
        data = asdict(self)
        data["title"] = redact_text(self.title)
        data["note"] = redact_text(self.note)
        data["argv"] = redact_argv(self.argv)
        data["exec_prefix"] = redact_argv(self.exec_prefix)
        data["env"] = redact_env(self.env)
        if self.docker is not None:
            docker = redact_data(self.docker)
            docker["environment"] = redact_env(self.docker.get("environment") or {})
            if "command" in docker:
                docker["command"] = redact_argv(self.docker["command"])
            data["docker"] = docker
        data["display"] = self.display()
        return data


@dataclass
class Plan:
    preset: str
    runner: str
    transformers: str
    steps: list[PlanStep]
    # What the seed does by hand once per machine that trainwiz checks instead of running
    # (``trainwiz check``): (what, why), printed at the top of the script.
    checks: list[tuple[str, str]] = field(default_factory=list)

    def step(self, step_id: str) -> PlanStep:
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)

    def group(self, group: str) -> list[PlanStep]:
        return [s for s in self.steps if s.group == group]

    def to_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "runner": self.runner,
            "transformers": self.transformers,
            "steps": [s.redacted() for s in self.steps],
            "checks": [{"what": what, "why": why} for what, why in self.checks],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def as_script(self) -> str:
        """The plan as a copy-pasteable shell script (comments carry the titles)."""
        lines = [
            comment(
                _("trainwiz plan for preset {preset} (runner: {runner})").format(
                    preset=self.preset, runner=self.runner
                )
            )
        ]
        lines.append("set -e  # stop at the first failing step, as a launch does")
        if self.checks:
            lines.append(comment(_("checked by 'trainwiz check', not run by this plan:")))
            lines += [comment(f"  {what}: {why}") for what, why in self.checks]
        for step in self.steps:
            lines.append("")
            lines.append(comment(f"[{step.group}] {redact_text(step.title)}"))
            if step.note:  # one comment per line: a ZeRO step's note is a JSON config
                lines += [comment(f"  {line}") for line in redact_text(step.note).splitlines()]
            if step.included_in:
                lines.append(
                    comment(
                        _("run by the {step} step, not on its own:").format(step=step.included_in)
                    )
                )
                lines.append(comment(f"  {step.display()}"))
            else:
                lines.append(step.display())
        return "\n".join(lines) + "\n"


_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _escape_controls(text: str) -> str:
    """Control characters (newline, ESC, NUL...) as visible ``\\n``/``\\xNN`` escapes."""
    out = []
    for char in text.replace("\\", "\\\\"):
        code = ord(char)
        if char == "\n":
            out.append("\\n")
        elif char == "\r":
            out.append("\\r")
        elif char != "\t" and (code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)


def comment(text: str) -> str:
    """One shell comment line, whatever ``text`` holds: no newline can end the comment early."""
    return "# " + _escape_controls(text)


def shell_word(value: str) -> str:
    """``value`` as one shell word. A NUL cannot be in an argument at all: shown escaped."""
    if "\x00" in value:
        value = value.replace("\x00", "\\x00")
    return shlex.quote(value)


@dataclass(frozen=True)
class Decided:
    """What a launch decides about this machine before the plan is built, so the plan's argv is
    the argv that runs: nothing is rewritten afterwards (``backend.runs.spec`` decides these).

    The defaults are the preset's own words (bare ``torchrun``, the preset's master_port):
    the plan of a preset with no machine in view.
    """

    master_port: int | None = None  # None: launch.master_port
    torchrun: str = "torchrun"
    trainwiz: tuple[str, ...] = ("trainwiz",)  # how this installation's CLI is run
    image: str | None = None  # the environment image tag (docker runner, mode image)
    run_env: dict[str, str] = field(default_factory=dict)  # env the run adds to training
    labels: dict[str, str] = field(default_factory=dict)  # docker labels of the run's container
