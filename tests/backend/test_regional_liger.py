"""Under regional compile the entry lets Liger apply its fused linear cross-entropy only
(backend/entry/regional.py ``liger_loss_only``): measured faster on an H100 than every Liger
kernel, since inductor fuses the norms, SwiGLU, RoPE and PEFT's dropout itself. A stand-in
liger_kernel package (the real one needs a GPU's Triton) records what the Trainer's call asks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backend.entry import ENTRY_SOURCE

if str(ENTRY_SOURCE.parent) not in sys.path:  # torchrun puts the entry's folder first
    sys.path.insert(0, str(ENTRY_SOURCE.parent))
import regional

# Liger's layout: a package whose __getattr__ loads monkey_patch lazily (liger-kernel 0.6)
PACKAGE = {
    "liger_kernel/__init__.py": "",
    "liger_kernel/transformers/__init__.py": (
        "import importlib\n"
        "def __getattr__(name):\n"
        "    module = importlib.import_module('liger_kernel.transformers.monkey_patch')\n"
        "    return getattr(module, name)\n"
    ),
    "liger_kernel/transformers/monkey_patch.py": (
        "CALLS = []\n"
        "def _apply_liger_kernel_to_instance(model, **kwargs):\n"
        "    CALLS.append((model, kwargs))\n"
    ),
}


@pytest.fixture
def fake_liger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for rel, text in PACKAGE.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("liger_kernel")]:
        monkeypatch.delitem(sys.modules, name)
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("liger_kernel")]:
        del sys.modules[name]


def test_the_trainers_liger_call_applies_the_loss_alone(fake_liger: Path) -> None:
    assert regional.liger_loss_only() is True
    assert regional.liger_loss_only() is True  # twice: wrapped once
    # what transformers' Trainer does for use_liger_kernel (its kernel config, default {})
    from liger_kernel.transformers import _apply_liger_kernel_to_instance

    _apply_liger_kernel_to_instance(model="m", rope=True)
    from liger_kernel.transformers import monkey_patch

    assert monkey_patch.CALLS == [
        (
            "m",
            {"rope": False, "swiglu": False, "rms_norm": False, "cross_entropy": False,
             "fused_linear_cross_entropy": True},
        )
    ]  # fmt: skip


def test_nothing_without_liger(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "liger_kernel" else real(name, *a),
    )
    assert regional.liger_loss_only() is False
