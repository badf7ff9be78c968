"""The README model card of an export: what the model is and how it was made.

Everything comes from the run directory (preset.yaml, metrics.jsonl, attempts.json) and the
data file itself (sha256 and size), so the card states facts about this run, not the preset's
intentions.
"""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

from backend.preset.schema import Preset
from backend.results.summary import RunSummary
from backend.units import duration


def file_facts(path: Path | None) -> tuple[str, int] | None:
    """(sha256, bytes) of a file, or None when it is not readable here."""
    if path is None or not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest(), path.stat().st_size


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _training(summary: RunSummary) -> str:
    """The card's training row: real tokens/s, wall time and GPU-hours, each as the Monitor,
    ``runs compare`` and the summary line show it (backend/monitor/figures.py defines them)."""
    parts = []
    if summary.real_tokens_per_s is not None:
        parts.append(f"{summary.real_tokens_per_s:,.0f} real tokens/s")
    if summary.wall_s is not None:
        parts.append(f"wall time {duration(summary.wall_s)}")
    if summary.gpu_hours is not None:
        gpus = f"{summary.gpus} GPU" if summary.gpus else "CPU"
        parts.append(f"{summary.gpu_hours:.2f} GPU-hours ({gpus})")
    return ", ".join(parts) or "-"


def _prompt_format(chat_template: str) -> str:
    """How prompts must be written: what the run trained with (its start line's chat_template)."""
    if chat_template == "vicuna":
        return "Prompts follow FastChat's `vicuna` conversation template (as in training)."
    if chat_template == "model":
        return (
            "Prompts follow the tokenizer's own chat template (as in training): "
            "`tokenizer.apply_chat_template(messages, add_generation_prompt=True)`."
        )
    return f"Prompts follow FastChat's `{chat_template}` conversation template (as in training)."


def render(
    run_id: str,
    preset: Preset,
    summary: RunSummary,
    *,
    data_file: Path | None,
    source: Path,
    n_params: int | None,
    chat_template: str = "vicuna",
) -> str:
    base = preset.model.repo or preset.model.git_url or preset.model.dir
    if preset.model.source == "tiny":
        base = f"tiny random-weight Llama made locally ({preset.model.dir})"
    facts = file_facts(data_file)
    data_line = (
        f"`{preset.training.data_path}`: sha256 `{facts[0]}`, {facts[1]} bytes"
        if facts
        else f"`{preset.training.data_path}` (not readable on this host: no hash)"
    )
    tr = preset.training
    hardware = (
        f"{summary.world_size or 1} x {summary.gpu_name}"
        if summary.gpu_name
        else f"CPU ({platform.machine()}), {summary.world_size or 1} process(es)"
    )
    lines = [
        "---",
        "library_name: transformers",
        "pipeline_tag: text-generation",
        "tags: [trainwiz, fastchat]",
        "---",
        "",
        f"# {preset.name} ({run_id})",
        "",
        f"Fine-tuned with trainwiz (FastChat's supervised fine-tune) from **{base}**.",
        "",
        "| | |",
        "|---|---|",
        f"| base model | {base} |",
        f"| data | {data_line} |",
        f"| preset | `{preset.name}` (preset.yaml of the run) |",
        f"| steps | {summary.steps} of {summary.max_steps or '-'} |",
        f"| final train loss | {_fmt(summary.final_loss)} (mean over the run {_fmt(summary.train_loss)}) |",
        f"| eval loss | {_fmt(summary.eval_loss)} (best {_fmt(summary.best_eval_loss)}"
        + (f" at step {summary.best_eval_step})" if summary.best_eval_step else ")")
        + " |",
        f"| hardware | {hardware} |",
        f"| training | {_training(summary)} |",
        f"| attempts | {summary.attempts}"
        + (" (resumed from checkpoints)" if summary.attempts > 1 else "")
        + " |",
        f"| parameters | {n_params if n_params is not None else '-'} |",
        f"| exported from | `{source}` |",
        "",
        "## Training settings",
        "",
        f"learning_rate {tr.learning_rate}, scheduler {tr.lr_scheduler_type}, "
        f"per_device_train_batch_size {tr.per_device_train_batch_size}, "
        f"gradient_accumulation_steps {tr.gradient_accumulation_steps}, "
        f"model_max_length {tr.model_max_length}, seed {tr.seed}, "
        f"bf16 {tr.bf16}, fsdp `{tr.fsdp or 'off'}`.",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        'model = AutoModelForCausalLM.from_pretrained("PATH")',
        'tokenizer = AutoTokenizer.from_pretrained("PATH"'
        + (", use_fast=False)" if chat_template == "vicuna" else ")"),
        "```",
        "",
        _prompt_format(chat_template),
        "",
    ]
    return "\n".join(lines)
