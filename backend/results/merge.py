"""Export of a LoRA/QLoRA run: the adapter alone, or (``--merge``) folded into its base model.

A LoRA run saves only ``adapter_model.safetensors`` + ``adapter_config.json`` (+ the tokenizer);
``export.py`` hands such runs here. Without ``--merge`` the export is that adapter and a model
card saying which base it needs; with ``--merge`` ``merge_lora.py`` (a sibling of the training
entry, copied into the run dir) runs as a subprocess in the training environment, adds
``B·A·alpha/r`` into each adapted weight and writes a plain safetensors model + tokenizer that
``AutoModelForCausalLM`` loads without peft. As in ``export.py`` everything is written into a
hidden sibling folder first and renamed into place, so ``--to DIR`` is whole or untouched.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from backend import subproc
from backend.entry import ENTRY_DIR
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.preset.schema import Preset
from backend.results.adapters import adapter_dir, base_model_dir, is_adapter_run
from backend.results.weights import uniform_modes, worker_python


def refuse_merge_of_full_run(run_dir: Path, preset: Preset) -> None:
    """``--merge`` only means something for an adapter: say so (exit 2) for a full run."""
    raise BadInput(
        _(
            "--merge: run {run} is a full fine-tune (training.method: {method}): its export is "
            "already the whole model; leave out --merge"
        ).format(run=run_dir.name, method=preset.training.method)
    )


def lora_summary(preset: Preset) -> str:
    lora = preset.training.lora
    kind = "QLoRA (4-bit nf4 base)" if preset.training.method == "qlora" else "LoRA"
    return (
        f"{kind} r={lora.lora_r}, alpha {lora.lora_alpha}, dropout {lora.lora_dropout}, "
        f"on {', '.join(lora.lora_target_modules)}"
    )


def card_for(card: str, preset: Preset, base: str, *, merged: bool) -> str:
    """The export's model card with what the method means for it: merged, or adapter only."""
    head, _sep, _use = card.partition("## Use")
    if merged:
        method = [
            "## Method",
            "",
            f"{lora_summary(preset)} merged into {base}: every weight is a plain Hugging Face "
            "weight (no peft needed). The adapter was trained; the rest of the base is unchanged.",
            "",
        ]
        use = _use
    else:
        method = [
            "## Method",
            "",
            f"{lora_summary(preset)}: this folder is the adapter only; it needs the base "
            f"{base}. Fold it in with `trainwiz export RUN --to DIR --merge`.",
            "",
        ]
        use = "\n".join([
            "", "", "```python", "from peft import PeftModel",
            "from transformers import AutoModelForCausalLM, AutoTokenizer",
            f'base = AutoModelForCausalLM.from_pretrained("{base}")',
            'model = PeftModel.from_pretrained(base, "PATH")',
            'tokenizer = AutoTokenizer.from_pretrained("PATH", use_fast=False)', "```", "",
        ])  # fmt: skip
    return head + "\n".join(method) + "\n## Use" + use


def _merge(run_dir: Path, python: str, base: Path, adapter: Path, tmp: Path, timeout: float) -> int:
    script = run_dir / "entry" / "merge_lora.py"
    if not script.is_file():  # a run dir from before merge_lora.py was copied
        script = ENTRY_DIR / "merge_lora.py"
    argv = [python, str(script), "--base", str(base), "--adapter", str(adapter), "--out", str(tmp)]
    # Its own process group: a timeout ends the merge and anything it started, not only python.
    done = subproc.run(argv, timeout=timeout, grace=5.0)
    lines = [ln for ln in done.lines if ln.startswith("{")]
    if not done.ok or not lines:
        said = [ln for ln in done.lines if ln.strip() and not ln.startswith("{")]
        tail = " | ".join(said[-5:])
        how = f"timed out after {timeout:g} s" if done.timed_out else f"exit {done.code}"
        raise TrainwizError(f"merge of {adapter} into {base} failed ({how}): {tail}")
    return int(json.loads(lines[-1]).get("params") or 0)


def export_adapter_run(
    run_dir: Path,
    to: Path,
    preset: Preset,
    *,
    merge: bool,
    checkpoint: int | None,
    timeout: float,
    card: Callable[..., str],
) -> tuple[Path, list[str], int | None]:
    """Write the adapter (or the merged model) + tokenizer + card into ``to``, atomically.

    ``card(source=, n_params=)`` renders export.py's model card; returns (source, files, params).
    """
    if not is_adapter_run(preset):
        refuse_merge_of_full_run(run_dir, preset)
    adapter = adapter_dir(run_dir, checkpoint)
    base = base_model_dir(adapter, preset) if merge else None
    tmp = to.parent / f".{to.name}.trainwiz-export-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        n_params: int | None = None
        if base is not None:
            n_params = _merge(run_dir, worker_python(run_dir), base, adapter, tmp, timeout)
        else:
            tmp.mkdir()
            for path in sorted(adapter.iterdir()):  # adapter, its config, the tokenizer
                if path.is_file() and (path.name.startswith(("adapter_", "tokenizer")) or
                                       path.name in ("special_tokens_map.json",)):  # fmt: skip
                    shutil.copy2(path, tmp / path.name)
        config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
        base_name = str(base or config.get("base_model_name_or_path") or preset.model.dir)
        text = card_for(
            card(source=adapter, n_params=n_params), preset, base_name, merged=base is not None
        )
        (tmp / "README.md").write_text(text, encoding="utf-8")
        uniform_modes(tmp)
        if to.exists():
            to.rmdir()  # empty (export.py checked)
        os.replace(tmp, to)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return adapter, sorted(p.name for p in to.iterdir()), n_params
