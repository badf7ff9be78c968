"""What the Hyperparameters step's Tune says and sets: pure functions over the preset and the
planner's answer (the screen only shows them), so the step module stays the form."""

from __future__ import annotations

from backend.i18n import _
from backend.planner import GpuSpec, ModelShape, TuneResult
from backend.planner.fields import FieldInfo, current_value, display_value
from backend.planner.method_search import method_lines
from backend.preset import Preset


def tune_refusal(preset: Preset, gpu: GpuSpec | None, shape: ModelShape | None) -> str | None:
    """Why Tune cannot run now (None: it can): a CPU preset, no GPU chosen, no model shape."""
    if preset.launch.device == "cpu":
        return _(
            "{name} trains on the CPU (launch.device: cpu): there is no GPU memory to "
            "tune. Open a GPU preset (ctrl+o) to plan for a GPU."
        ).format(name=preset.name)
    if gpu is None:
        return _("Choose the GPU to plan for (the list at the top right).")
    if shape is None:
        return _(
            "The model's shape is unknown: {dir} has no config.json and the repo is not "
            "a known one. Fetch the model in the Model step."
        ).format(dir=preset.model.dir)
    return None


def tuned_values(result: TuneResult, fields: dict[str, FieldInfo]) -> dict[str, str | bool]:
    """The form's text for each field Tune changed, as its row shows it."""
    out: dict[str, str | bool] = {}
    for change in result.changes:
        path = change.path.removeprefix("training.")
        if path.startswith("fsdp_config."):
            path = "fsdp_config"
        if path in fields:
            value = current_value(result.preset, path)
            out[path] = bool(value) if fields[path].kind == "bool" else display_value(value)
    return out


def tune_report(result: TuneResult) -> str:
    """The side pane's account of a Tune: each change and why, the notes, the methods."""
    lines = [
        _("Tune: {count} change(s), x{speedup} predicted").format(
            count=len(result.changes), speedup=f"{result.speedup:.1f}"
        )
    ]
    lines += [f"- {c.path}: {c.old!r} -> {c.new!r}: {c.reason}" for c in result.changes]
    lines += result.notes
    lines += method_lines(result)  # LoRA/QLoRA/ZeRO beside the answer (docs/lora.md)
    return "\n".join(lines)
