"""Where a training step's time goes: torch.profiler over a few steps, summed by kind of work.

A sibling of ``train_entry.py`` (standard library and torch only). Off unless the trainer's
environment has ``TRAINWIZ_PROFILE_STEPS=FIRST:COUNT`` (e.g. ``6:3``: optimizer steps 6, 7 and 8,
after compile and warm-up). The benchmarks set it (``benchmarks/device/profile_step.sh``) to find
what keeps a run under its MFU target; it is not a preset field because it slows the profiled
steps and changes nothing the run learns.

Rank 0 writes ``<run_dir>/profile.json``: each profiled step's wall time (the step callback's
clock: forward, backward, optimizer, the data loader's next batch), the GPU's busy time inside it
(the union of its kernels' intervals, so overlapping streams count once), the difference as
"GPU idle" (host work, syncs, launch gaps), and the kernels' time by kind: matmul, attention,
loss (fused cross-entropy), optimizer, elementwise (compiled or eager), communication, memory
copies and other, with the 25 kernels that took longest. ``profile-trace.json.gz`` beside it is
the Chrome trace for a closer look (chrome://tracing, Perfetto).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
from typing import Any

import torch

ENV = "TRAINWIZ_PROFILE_STEPS"

# Kinds of kernels by name, first match wins. The names are the libraries' own: cuBLAS/CUTLASS
# GEMMs (sm90_xmma_gemm..., nvjet_..., cutlass...), FlashAttention and the flex templates
# (flash_fwd..., triton_tem_fused_flex_attention...), Liger's fused linear cross-entropy,
# torch's fused/foreach AdamW (multi_tensor_apply_kernel), NCCL collectives.
KINDS: list[tuple[str, re.Pattern[str]]] = [
    ("communication", re.compile(r"nccl", re.I)),
    ("memory", re.compile(r"^(memcpy|memset)|Memcpy|Memset", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|flex|sdpa|_attn", re.I)),
    # Liger's fused linear cross-entropy scales the gradient chunks with element_mul_kernel
    ("loss", re.compile(r"cross_entropy|liger|_ce_|logsoftmax|log_softmax|element_mul", re.I)),
    ("optimizer", re.compile(r"adam|multi_tensor_apply|foreach|_fused_sgd|clip_grad|l2norm", re.I)),
    ("matmul", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|matmul|wgmma|sm\d\d_|splitk", re.I)),
    (
        "elementwise",
        # eager and compiled pointwise work, Liger's RMSNorm/SwiGLU/RoPE, PEFT's dropout
        re.compile(
            r"elementwise|vectorized|triton_(poi|red|per)|reduce_kernel|unrolled|rms_norm|"
            r"layer_norm|swiglu|_rope|dropout|bernoulli",
            re.I,
        ),
    ),
]


def parse(value: str | None) -> tuple[int, int] | None:
    """``FIRST:COUNT`` as two positive integers, or None when unset or malformed."""
    found = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", value or "")
    if not found or int(found.group(1)) < 1 or int(found.group(2)) < 1:
        return None
    return int(found.group(1)), int(found.group(2))


def kind_of(name: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def summarize(
    kernels: list[tuple[str, float, float]], steps: list[tuple[float, float]]
) -> dict[str, Any]:
    """``kernels``: (name, start s, end s) on the GPU; ``steps``: (start s, end s) of each
    profiled step on the same clock. Kernel time by kind, busy and idle time per step."""
    by_kind: dict[str, float] = {}
    by_name: dict[str, list[float]] = {}
    for name, start, end in kernels:
        took = max(0.0, end - start)
        by_kind[kind_of(name)] = by_kind.get(kind_of(name), 0.0) + took
        entry = by_name.setdefault(name, [0.0, 0.0])
        entry[0] += took
        entry[1] += 1
    per_step = []
    for start, end in steps:
        inside = [(max(s, start), min(e, end)) for _n, s, e in kernels if e > start and s < end]
        busy = busy_time(inside)
        per_step.append(
            {"wall_s": end - start, "gpu_busy_s": busy, "gpu_idle_s": end - start - busy}
        )
    wall = sum(s["wall_s"] for s in per_step)
    kernel_total = sum(by_kind.values())
    top = sorted(by_name.items(), key=lambda item: -item[1][0])[:25]
    return {
        "steps": per_step,
        "wall_s": wall,
        "gpu_busy_s": sum(s["gpu_busy_s"] for s in per_step),
        "kernel_s": kernel_total,
        "by_kind_s": dict(sorted(by_kind.items(), key=lambda item: -item[1])),
        "by_kind_share_of_wall": {k: v / wall for k, v in by_kind.items()} if wall else {},
        "top_kernels": [
            {"name": name[:160], "kind": kind_of(name), "s": took, "calls": int(calls)}
            for name, (took, calls) in top
        ],
    }


STEP_RANGE = "trainwiz_profiled_step"


def _recorded(prof: Any) -> tuple[list[tuple[str, float, float]], list[tuple[float, float]]]:
    """(GPU kernels as (name, start s, end s), the profiled steps' (start s, end s)), both on
    the profiler's one clock: each step is a ``record_function`` range around it."""
    cuda = torch.autograd.DeviceType.CUDA
    kernels, steps = [], []
    for event in prof.events():
        span = (event.time_range.start / 1e6, event.time_range.end / 1e6)
        if getattr(event, "device_type", None) == cuda:
            # record_function ranges (this step's, the optimizer's "Optimizer.step#AdamW.step")
            # are mirrored on the GPU timeline: spans, not kernels
            if event.name != STEP_RANGE and not getattr(event, "is_user_annotation", False):
                kernels.append((event.name, *span))
        elif event.name == STEP_RANGE:
            steps.append(span)
    return kernels, sorted(steps)


# Chrome-trace categories of work on the GPU (kernels, copies, fills); "gpu_user_annotation"
# spans (record_function ranges mirrored on the GPU) are not work and are left out.
TRACE_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def from_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """``summarize`` of a Chrome trace this profiler exported (``profile-trace.json.gz``,
    loaded): the same figures as profile.json, re-made offline (e.g. with changed kinds)."""
    kernels, steps = [], []
    for event in trace.get("traceEvents", []):
        if event.get("ph") != "X" or "dur" not in event:
            continue
        span = (float(event["ts"]) / 1e6, (float(event["ts"]) + float(event["dur"])) / 1e6)
        if event.get("cat") in TRACE_GPU_CATEGORIES:
            kernels.append((str(event.get("name", "")), *span))
        elif event.get("cat") == "user_annotation" and event.get("name") == STEP_RANGE:
            steps.append(span)
    return summarize(kernels, sorted(steps))


class StepProfiler:
    """The callback body (the Trainer's callback class is made in ``make_callback``)."""

    def __init__(self, first: int, count: int, run_dir: str) -> None:
        self.first, self.count, self.run_dir = first, count, run_dir
        self.prof: Any = None
        self.steps = 0
        self.range: Any = None
        self.done = False

    def step_begin(self, step: int) -> None:
        if self.done or step + 1 < self.first:  # the step about to run is global_step + 1
            return
        if self.prof is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self.prof = torch.profiler.profile(activities=activities)
            self.prof.__enter__()
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the range holds this step's kernels and no earlier ones
        self.range = torch.profiler.record_function(STEP_RANGE)
        self.range.__enter__()

    def step_end(self) -> None:
        if self.range is None or self.done:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.range.__exit__(None, None, None)
        self.range = None
        self.steps += 1
        if self.steps >= self.count:
            self.finish()

    def finish(self) -> None:
        if self.prof is None or self.done:
            return
        self.done = True
        if self.range is not None:  # the training ended inside a profiled step
            self.range.__exit__(None, None, None)
        self.prof.__exit__(None, None, None)
        out: dict[str, Any] = {"first_step": self.first, "count": self.steps}
        try:
            kernels, steps = _recorded(self.prof)
            out.update(summarize(kernels, steps))
            out["device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        except Exception as exc:  # the trace below still holds everything
            out["error"] = f"{type(exc).__name__}: {exc}"
        with open(os.path.join(self.run_dir, "profile.json"), "w", encoding="utf-8") as handle:
            json.dump(out, handle, indent=1)
        trace = os.path.join(self.run_dir, "profile-trace.json")
        try:
            self.prof.export_chrome_trace(trace)
            with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.remove(trace)
        except Exception:  # the summary above is what counts; the trace is extra
            pass


def make_callback(transformers: Any, run_dir: str | None) -> Any:
    """A TrainerCallback profiling ``TRAINWIZ_PROFILE_STEPS`` on rank 0, or None when unset."""
    wanted = parse(os.environ.get(ENV))
    if wanted is None or not run_dir or int(os.environ.get("RANK", "0")) != 0:
        return None
    body = StepProfiler(wanted[0], wanted[1], run_dir)

    class ProfileCallback(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            body.step_begin(int(state.global_step))

        def on_step_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            body.step_end()

        def on_train_end(self, args, state, control, **kwargs):  # type: ignore[no-untyped-def]
            body.finish()

    return ProfileCallback()
