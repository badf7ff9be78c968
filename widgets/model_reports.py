"""The Model step's two reports as text: the model as validated, the data as checked.

Pure rendering (rich ``Text``) of ``backend.model.validate.ModelReport`` and
``backend.data.check.DataReport``: every figure is one the backend measured, nothing is added.
Kept out of the screen so the screen holds only its form, workers and messages.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from backend.data.check import DataReport
from backend.i18n import _
from backend.model.validate import ModelReport
from backend.units import human


def model_summary(r: ModelReport) -> Text:
    """The validation result as the planner will use it: shape, parameters, dtype, problems."""
    c = r.config
    text = Text()
    text.append(f"{c.architecture or 'unknown architecture'}", style="bold")
    text.append(f"  ({c.model_type})\n")
    text.append(
        _(
            "hidden {hidden_size} · layers {num_hidden_layers} · heads {num_attention_heads} "
            "· KV heads {num_key_value_heads} · ffn {intermediate_size}\n"
        ).format(
            hidden_size=c.hidden_size,
            num_hidden_layers=c.num_hidden_layers,
            num_attention_heads=c.num_attention_heads,
            num_key_value_heads=c.num_key_value_heads,
            intermediate_size=c.intermediate_size,
        )
    )
    text.append(
        _("vocab {vocab_size} · max positions {max_position_embeddings}\n").format(
            vocab_size=c.vocab_size, max_position_embeddings=c.max_position_embeddings
        )
    )
    params = f"{r.n_params:,}" if r.n_params is not None else "unknown"
    text.append(_("parameters {params}").format(params=params), style="bold")
    text.append(f" ({r.n_params_source})\n")
    text.append(
        _("dtype {dtype} · {weight_format}, {count} file(s), ").format(
            dtype=r.dtype, weight_format=r.weight_format, count=len(r.shards)
        )
    )
    text.append(f"{human(r.weights_bytes)}\n")
    text.append(_("tokenizer {value}\n").format(value=", ".join(r.tokenizer_files) or "none"))
    for warning in r.warnings:
        text.append(f"! {warning}\n", style="yellow")
    for problem in r.problems:
        text.append(f"✗ {problem}\n", style="bold red")
    if r.ok:
        text.append(_("✓ valid"), style="bold green")
    return text


def data_summary(r: DataReport) -> Text:
    """The data check as FastChat will train on it: records, issues, token lengths, truncation."""
    text = Text()
    text.append(
        _("{name}: {n_records} records, {n_turns} turns\n").format(
            name=Path(r.path).name, n_records=r.n_records, n_turns=r.n_turns
        ),
        style="bold",
    )
    for issue in r.issues[:8]:
        style = "bold red" if issue.severity == "error" else "yellow"
        text.append(f"{'✗' if issue.severity == 'error' else '!'} {issue.line()}\n", style=style)
    more = sum(r.counts.values()) - min(len(r.issues), 8)
    if more > 0:
        text.append(_("… {more} more issue(s)\n").format(more=more), style="italic")
    t = r.tokens
    if t is not None:
        text.append(
            _("tokens mean {mean} · p50 {p50} · p90 {p90} · p99 {p99} · max {max}\n").format(
                mean=t.mean, p50=t.p50, p90=t.p90, p99=t.p99, max=t.max
            )
        )
        style = "yellow" if t.truncated else ""
        text.append(
            _("truncated at {model_max_length}: {truncated} ({truncated_share:.1%})\n").format(
                model_max_length=t.model_max_length,
                truncated=t.truncated,
                truncated_share=t.truncated_share,
            ),
            style=style,
        )
        if t.mismatched:
            text.append(
                _(
                    "✗ {mismatched} record(s) FastChat would mask out (tokenization mismatch)\n"
                ).format(mismatched=t.mismatched),
                style="bold red",
            )
    else:
        why = r.tokens_unavailable or _("no tokenizer yet: fetch the model first")
        text.append(_("token lengths unavailable: {why}\n").format(why=why), style="italic")
    if r.ok:
        text.append(_("✓ FastChat can train on it"), style="bold green")
    return text
