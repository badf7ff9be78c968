"""Benchmark-only: which of Liger's kernels a launch applies (benchmarks/device/lora_sweep.sh).

On ``PYTHONPATH`` of the device benchmarks; does nothing unless the training process has
``TRAINWIZ_BENCH_LIGER=loss`` (a row's ``launch.env``). Then, when Hugging Face's Trainer applies
Liger (``use_liger_kernel``), only its fused linear cross-entropy is applied: RMSNorm, SwiGLU and
RoPE stay the model's own, for regional compile to fuse. This measures that split before the
entry offers it; nothing is imported until Liger's own module is.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from typing import Any

TARGET = "liger_kernel.transformers.monkey_patch"
LOSS_ONLY = {"rope": False, "swiglu": False, "rms_norm": False, "cross_entropy": False,
             "fused_linear_cross_entropy": True}  # fmt: skip


def _patch(module: Any) -> None:
    original = module._apply_liger_kernel_to_instance

    def loss_only(model: Any, **kwargs: Any) -> None:
        kwargs.update(LOSS_ONLY)
        print(f"[bench-liger] Liger kernels: {kwargs}", flush=True)
        original(model=model, **kwargs)

    module._apply_liger_kernel_to_instance = loss_only


class _Finder(importlib.abc.MetaPathFinder):
    busy = False

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TARGET or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("TRAINWIZ_BENCH_LIGER") == "loss":
    sys.meta_path.insert(0, _Finder())

# Chain to the next sitecustomize on the path (the image's own, if it has one).
_here = os.path.dirname(os.path.abspath(__file__))
for _dir in sys.path:
    _file = os.path.join(_dir, "sitecustomize.py")
    if os.path.abspath(_dir or ".") != _here and os.path.isfile(_file):
        with open(_file, encoding="utf-8") as _fh:
            exec(
                compile(_fh.read(), _file, "exec"), {"__name__": "sitecustomize", "__file__": _file}
            )
        break
