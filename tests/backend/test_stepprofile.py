"""The step profiler of the entry (backend/entry/stepprofile.py): its arithmetic on written
intervals, its kinds on the libraries' kernel names, and one real profiled CPU run."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ENTRY = Path(__file__).resolve().parents[2] / "backend" / "entry"


@pytest.fixture(scope="module")
def stepprofile() -> ModuleType:
    pytest.importorskip("torch")  # the training side; installed with the dev extras
    spec = importlib.util.spec_from_file_location("stepprofile", ENTRY / "stepprofile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["stepprofile"] = module
    spec.loader.exec_module(module)
    return module


def test_parse_takes_first_and_count_and_nothing_else(stepprofile: ModuleType) -> None:
    assert stepprofile.parse("6:3") == (6, 3)
    assert stepprofile.parse(" 2 : 1 ") == (2, 1)
    for bad in (None, "", "6", "0:3", "6:0", "a:b", "6:3:1", "-1:2"):
        assert stepprofile.parse(bad) is None, bad


def test_busy_time_counts_overlaps_once(stepprofile: ModuleType) -> None:
    assert stepprofile.busy_time([]) == 0.0
    assert stepprofile.busy_time([(0.0, 1.0), (0.5, 1.5), (2.0, 3.0)]) == pytest.approx(2.5)
    assert stepprofile.busy_time([(0.0, 4.0), (1.0, 2.0)]) == pytest.approx(4.0)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1",
            "matmul",
        ),
        ("nvjet_tst_192x192_64x3_2x1_v_bz_coopB_TNT", "matmul"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64>", "matmul"),
        ("flash_fwd_splitkv_kernel", "attention"),
        ("triton_tem_fused_flex_attention_backward_0", "attention"),
        ("_fused_linear_cross_entropy_kernel", "loss"),
        (
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>",
            "optimizer",
        ),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
        ("Memcpy HtoD (Pageable -> Device)", "memory"),
        ("triton_poi_fused_add_mul_silu_3", "elementwise"),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor>",
            "elementwise",
        ),
        ("_rms_norm_forward_kernel", "elementwise"),  # Liger's RMSNorm, SwiGLU, RoPE
        ("_swiglu_backward_kernel", "elementwise"),
        ("_triton_rope", "elementwise"),
        (
            "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16>",
            "elementwise",
        ),
        ("element_mul_kernel", "loss"),  # Liger's fused linear cross-entropy, gradient chunks
        ("some_new_kernel", "other"),
    ],
)
def test_kernels_are_sorted_by_their_own_names(
    stepprofile: ModuleType, name: str, kind: str
) -> None:
    assert stepprofile.kind_of(name) == kind


def test_summary_splits_each_step_into_busy_and_idle(stepprofile: ModuleType) -> None:
    kernels = [
        ("nvjet_gemm", 0.0, 0.4),
        ("flash_fwd_kernel", 0.3, 0.6),  # overlaps the GEMM: busy once
        ("multi_tensor_apply_kernel", 0.8, 0.9),
        ("nvjet_gemm", 1.1, 1.5),
    ]
    out = stepprofile.summarize(kernels, [(0.0, 1.0), (1.0, 2.0)])
    first, second = out["steps"]
    assert first == pytest.approx({"wall_s": 1.0, "gpu_busy_s": 0.7, "gpu_idle_s": 0.3})
    assert second == pytest.approx({"wall_s": 1.0, "gpu_busy_s": 0.4, "gpu_idle_s": 0.6})
    assert out["by_kind_s"] == pytest.approx({"matmul": 0.8, "attention": 0.3, "optimizer": 0.1})
    assert list(out["by_kind_s"]) == ["matmul", "attention", "optimizer"]  # longest first
    top = out["top_kernels"][0]
    assert top == {"name": "nvjet_gemm", "kind": "matmul", "s": pytest.approx(0.8), "calls": 2}
    assert out["wall_s"] == pytest.approx(2.0) and out["gpu_busy_s"] == pytest.approx(1.1)


def test_annotations_mirrored_on_the_gpu_are_not_kernels(stepprofile: ModuleType) -> None:
    """torch.profiler mirrors record_function ranges on the GPU timeline (this step's range,
    the optimizer's "Optimizer.step#AdamW.step"): counted as kernels they made the step's range
    'other' and its whole wall 'busy', and doubled the optimizer's time (seen on an H100)."""
    import torch

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    class Span:
        def __init__(self, start: float, end: float) -> None:
            self.start, self.end = start, end

    class Event:
        def __init__(self, name: str, device: object, start: float, end: float,
                     annotation: bool = False) -> None:  # fmt: skip
            self.name, self.device_type = name, device
            self.time_range = Span(start * 1e6, end * 1e6)
            self.is_user_annotation = annotation

    class Prof:
        def events(self) -> list[Event]:
            return [
                Event(stepprofile.STEP_RANGE, cpu, 0.0, 1.0, annotation=True),
                Event(stepprofile.STEP_RANGE, cuda, 0.0, 1.0, annotation=True),
                Event("Optimizer.step#AdamW.step", cuda, 0.6, 0.9, annotation=True),
                Event("nvjet_sm90_gemm", cuda, 0.1, 0.5),
                Event("multi_tensor_apply_kernel", cuda, 0.6, 0.8),
            ]

    kernels, steps = stepprofile._recorded(Prof())
    assert [k[0] for k in kernels] == ["nvjet_sm90_gemm", "multi_tensor_apply_kernel"]
    assert steps == [(0.0, 1.0)]
    out = stepprofile.summarize(kernels, steps)
    assert out["gpu_busy_s"] == pytest.approx(0.6)
    assert out["by_kind_s"] == pytest.approx({"matmul": 0.4, "optimizer": 0.2})


def test_a_chrome_trace_is_summarized_the_same_way(stepprofile: ModuleType) -> None:
    """from_trace re-makes profile.json's figures from the exported trace: kernels, copies and
    fills are work; GPU annotations are not; the steps are the CPU-side ranges."""
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": stepprofile.STEP_RANGE, "ts": 0, "dur": 1e6},
            {"ph": "X", "cat": "gpu_user_annotation", "name": stepprofile.STEP_RANGE, "ts": 0, "dur": 1e6},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "Optimizer.step#AdamW.step", "ts": 6e5, "dur": 3e5},
            {"ph": "X", "cat": "kernel", "name": "nvjet_sm90_gemm", "ts": 1e5, "dur": 4e5},
            {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 5e5, "dur": 1e5},
            {"ph": "X", "cat": "kernel", "name": "multi_tensor_apply_kernel", "ts": 6e5, "dur": 2e5},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 9e5},
            {"ph": "i", "cat": "kernel", "name": "instant", "ts": 0},
        ]
    }  # fmt: skip
    out = stepprofile.from_trace(trace)
    assert out["wall_s"] == pytest.approx(1.0) and out["gpu_busy_s"] == pytest.approx(0.7)
    assert out["by_kind_s"] == pytest.approx({"matmul": 0.4, "optimizer": 0.2, "memory": 0.1})


@pytest.mark.slow
def test_a_profiled_cpu_run_writes_its_steps(
    stepprofile: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three real optimizer steps of a tiny model under the Trainer's own callback calls: the
    file names the steps asked for, each with its wall time (no GPU here: no kernels)."""
    import torch
    import transformers

    monkeypatch.setenv(stepprofile.ENV, "2:2")
    monkeypatch.setenv("RANK", "0")
    callback = stepprofile.make_callback(transformers, str(tmp_path))
    assert callback is not None
    state = transformers.TrainerState()
    layer = torch.nn.Linear(8, 8)
    for step in range(4):
        state.global_step = step
        callback.on_step_begin(None, state, None)
        layer(torch.randn(4, 8)).sum().backward()
        callback.on_step_end(None, state, None)
    callback.on_train_end(None, state, None)
    written = json.loads((tmp_path / "profile.json").read_text())
    assert written["first_step"] == 2 and written["count"] == 2
    assert "error" not in written, written
    assert len(written["steps"]) == 2
    assert all(s["wall_s"] > 0 and s["gpu_busy_s"] == 0 for s in written["steps"])
    assert (tmp_path / "profile-trace.json.gz").stat().st_size > 0


def test_off_unless_asked_and_only_on_rank_0(
    stepprofile: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import transformers

    monkeypatch.delenv(stepprofile.ENV, raising=False)
    assert stepprofile.make_callback(transformers, str(tmp_path)) is None
    monkeypatch.setenv(stepprofile.ENV, "1:1")
    monkeypatch.setenv("RANK", "1")
    assert stepprofile.make_callback(transformers, str(tmp_path)) is None
    assert os.listdir(tmp_path) == []
