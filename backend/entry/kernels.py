"""Fused kernels and optimizer for the entry, each gated on what is installed (off, with a line).

The preset names them as Hugging Face's own TrainingArguments flags (``--use_liger_kernel``,
``--optim adamw_torch_fused``, ``--torch_compile``), so the plan shows exactly what is passed.
Here the entry drops a flag the installed stack cannot honour, instead of failing at start:
liger_kernel missing (HF raises ImportError), a transformers without the field (the parser
rejects it), a torch whose AdamW has no ``fused`` mode, torch.compile before torch 2.0.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
from typing import Any


def log(*args: Any) -> None:
    if int(os.environ.get("RANK", "0")) == 0:
        print("[trainwiz-entry] kernels:", *args, flush=True)


def _flag_on(value: str | None) -> bool:
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def _fused_adamw_ok(torch: Any) -> bool:
    return "fused" in inspect.signature(torch.optim.AdamW.__init__).parameters


def gate(
    argv: list[str], pop_option: Any, training_cls: Any, torch: Any, lm_head_adapter: bool = False
) -> dict[str, Any]:
    """Drop what cannot run here from argv; return what stays on (for the metrics' start line).

    ``lm_head_adapter``: LoRA adapts lm_head. Liger's fused linear cross-entropy multiplies by
    ``lm_head.weight`` itself (PEFT's base weight), so that adapter would get no gradient and
    no say in the loss: Liger stays off. With any other LoRA targets Liger is fine (HF Trainer
    patches the PEFT model's base model; its SwiGLU/RMSNorm call the adapted projections)."""
    fields = {f.name for f in dataclasses.fields(training_cls)}
    active: dict[str, Any] = {}
    liger = pop_option(argv, "use_liger_kernel")
    if _flag_on(liger):
        if lm_head_adapter:
            log(
                "use_liger_kernel: LoRA adapts lm_head, which Liger's fused loss would bypass "
                "(it reads lm_head.weight): off"
            )
        elif "use_liger_kernel" not in fields:
            log("use_liger_kernel: this transformers has no such argument: off")
        elif importlib.util.find_spec("liger_kernel") is None:
            log("use_liger_kernel: liger_kernel is not installed (pip install liger-kernel): off")
        elif not torch.cuda.is_available():
            log("use_liger_kernel: Liger's Triton kernels need a GPU: off")
        else:
            argv += ["--use_liger_kernel", "True"]
            active["use_liger_kernel"] = True
    compile_flag = pop_option(argv, "torch_compile")
    if _flag_on(compile_flag):
        major = int(torch.__version__.split(".")[0])
        if "torch_compile" not in fields or major < 2:
            log("torch_compile: needs torch >= 2.0 and a transformers that has it: off")
        else:
            argv += ["--torch_compile", "True"]
            active["torch_compile"] = True
    optim = pop_option(argv, "optim")
    if optim is not None:
        if optim == "adamw_torch_fused" and not _fused_adamw_ok(torch):
            log("optim adamw_torch_fused: this torch's AdamW has no fused mode: adamw_torch")
            optim = "adamw_torch"
        argv += ["--optim", optim]
        active["optim"] = optim
    return active
