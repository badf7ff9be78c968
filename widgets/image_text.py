"""The Image step's text: the host line, one image's reasons, a pull's layers, a build's summary.

Pure rendering (rich ``Text`` and plain lines) of what ``backend.images`` surveyed, pulled or
will build; the screen holds only its table, workers and messages.
"""

from __future__ import annotations

from rich.text import Text

from backend import paths
from backend.i18n import N_, _
from backend.images.build import BuildResult
from backend.images.events import LayerProgress
from backend.images.survey import ImageRow, ImagesSurvey
from backend.images.venv import VenvResult
from backend.preset import Preset

VERDICT_STYLE = {"compatible": "green", "warning": "yellow", "incompatible": "red"}
VERDICT_MARK = {"compatible": "✓", "warning": "!", "incompatible": "✗"}
VERDICT_WORDS = {
    "compatible": N_("compatible"),
    "warning": N_("warning"),
    "incompatible": N_("incompatible"),
}
LEVEL_STYLE = {"ok": "green", "warning": "yellow", "incompatible": "bold red"}


def host_line(survey: ImagesSurvey, suggestion: str | None = None) -> Text:
    """Driver, CUDA and GPUs as measured (or plainly 'none')."""
    host = survey.host
    text = Text()
    if host.driver_version:
        text.append(
            _("driver {driver_version}").format(driver_version=host.driver_version), style="bold"
        )
        text.append(_(" · CUDA ≤ {value} · ").format(value=host.cuda_driver or "?"))
        names = sorted({f"{g.name} (sm{g.sm})" for g in host.gpus})
        text.append(f"{len(host.gpus)}× " + ", ".join(names) if host.gpus else _("no GPUs"))
    else:
        text.append(_("no NVIDIA driver on this machine"), style="yellow")
    text.append(_(" · preset {preset}").format(preset=survey.preset))
    if survey.mirrors:
        text.append(_("\nregistry mirrors: {items}").format(items=", ".join(survey.mirrors)))
    if survey.docker_error:
        text.append(
            _("\nlocal images not listed: {docker_error}").format(docker_error=survey.docker_error),
            style="yellow",
        )
    if suggestion:
        text.append(_("\nsuggested: "), style="bold")
        text.append(suggestion, style="bold green")
    else:
        text.append(_("\nno compatible image for this machine and preset"), style="bold red")
    return text


def reasons_text(row: ImageRow, current: str) -> Text:
    """One image's facts and each check's verdict with its reason (✓ ! ✗)."""
    image, compat = row.image, row.compat
    text = Text()
    text.append(image.ref, style="bold")
    if image.ref == current:
        text.append(_("  (the preset's image)"), style="italic")
    text.append("\n")
    facts = [
        f"torch {image.torch or '?'}",
        f"CUDA {image.cuda or '-'}",
        f"cuDNN {image.cudnn or '-'}",
        f"python {image.python or '?'}",
        image.flavor or "?",
        _("flash-attn included") if image.flash_attn else _("no flash-attn"),
    ]
    text.append(" · ".join(facts) + "\n", style="dim")
    for reason in compat.reasons:
        mark = "✓" if reason.level == "ok" else ("!" if reason.level == "warning" else "✗")
        text.append(f"{mark} {reason.text}\n", style=LEVEL_STYLE[reason.level])
    return text


def layers_text(layers: dict[str, LayerProgress]) -> Text:
    """The last 8 layers of a pull, each with its state and bytes as Docker reports them."""
    text = Text()
    for layer, state in list(layers.items())[-8:]:
        size = ""
        if state.total:
            size = f" {state.current or 0:,}/{state.total:,} B"
        text.append(f"{layer}: {state.status}{size}\n")
    return text


def build_summary(preset: Preset, target: str) -> tuple[list[str], list[str]]:
    """What building ``preset``'s environment runs and where it lands, as the dialog lists them."""
    if preset.launch.runner == "docker":
        runs = [
            _("docker build of {target} from {image}").format(
                target=target, image=preset.environment.image
            ),
            _("FastChat, transformers, accelerate and their pins installed in it"),
        ]
        where = [_("this machine's Docker daemon (image {target})").format(target=target)]
        return runs, where
    runs = [
        _("python -m venv, then pip install of FastChat, transformers, accelerate, torch"),
        _("about 1-2 GB; reused next time (cached by a hash of its inputs)"),
    ]
    where = [
        _("a venv under {path}").format(path=paths.envs_dir()),
        _("the preset's environment.venv is set to it, so Launch trains in it"),
    ]
    return runs, where


def build_result_lines(result: BuildResult | VenvResult) -> list[tuple[str, str]]:
    """A finished build as log lines (text, style): what was built or reused, or why it failed,
    the failing Dockerfile line and the diagnosis findings, and where the full log is."""
    if isinstance(result, VenvResult):
        if not result.ok:
            return [
                (_("✗ host environment failed: {error}").format(error=result.error), "bold red")
            ]
        state = "reused" if result.cached else f"built in {result.seconds:.0f} s"
        line = _("✓ host environment {path} ({state})").format(path=result.path, state=state)
        return [(line, "bold green")]
    if result.ok:
        state = "cache hit" if result.cached else f"built in {result.seconds:.0f} s"
        return [(f"✓ {result.tag} ({state})", "bold green")]
    lines = [(_("✗ build failed: {error}").format(error=result.error), "bold red")]
    if result.error_line:
        where = _("  line {error_line_no}: {error_line}").format(
            error_line_no=result.error_line_no, error_line=result.error_line
        )
        lines.append((where, "red"))
    for finding in result.findings:
        lines.append((f"  {finding.category}: {finding.title}", "yellow"))
        if finding.explanation:
            lines.append((f"    {finding.explanation}", ""))
    lines.append((_("  full log: {log_path}").format(log_path=result.log_path), "dim"))
    return lines


def venv_text(
    name: str, wanted: list[str] | None, torchrun: str | None, own: bool, venv: str | None
) -> Text:
    """A host preset's environment: what a built venv holds (``wanted``), whether one is ready
    (``torchrun``) and whether Launch trains in the venv ``b`` builds (``own``)."""
    text = Text()
    text.append(
        _("{name} trains on this host (launch.runner: host) in a Python venv").format(name=name),
        style="bold",
    )
    text.append(_(": no container image and no CUDA image is used.") + "\n")
    if wanted is not None:
        text.append(_("a built venv's packages: ") + ", ".join(wanted) + "\n", style="dim")
    if torchrun is not None:
        text.append(
            "✓ " + _("training venv ready: {bin}").format(bin=torchrun) + "\n", style="green"
        )
        if own:
            text.append(_("Launch trains with it. b rebuilds or reuses it (cached by a hash)."))
        else:  # trainwiz's own environment (or PATH): b makes another, then switches to it
            text.append(
                _(
                    "Launch trains with it (trainwiz's own environment). b builds a venv "
                    "with the packages above instead (cached by a hash); Launch then "
                    "trains in that one."
                )
            )
        return text
    where = venv or _("not built yet")
    text.append("✗ " + _("training venv: {where}").format(where=where) + "\n", style="yellow")
    text.append(_("b builds it once (you confirm first); Launch then trains in it."))
    return text
