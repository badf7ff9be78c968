"""trainwiz's own informational lines never outrank the failure that ended a run.

The entry says what it chose ("flash_attn unusable (...); using sdpa"), quoting a library's
message that a signature matches elsewhere as a failure. Such a line must not become a finding:
the GPU OOM after it is the cause, and the attempt record the OOM fallback reads says so.
"""

from __future__ import annotations

from backend.diagnosis import diagnose_text
from backend.rundir import LOG, create_run_dir
from backend.runs.resume import begin_attempt, end_attempt

OWN = (
    "[trainwiz-entry] flash_attn unusable (ModuleNotFoundError: No module named 'flash_attn'); "
    "using sdpa\n"
    "[trainwiz-entry] use_liger_kernel: liger_kernel is not installed (pip install liger-kernel): off\n"
)
OOM = (
    '  File "/opt/conda/lib/python3.11/site-packages/torch/optim/adamw.py", line 517, in _multi_tensor_adamw\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.12 GiB. GPU 0 has a total "
    "capacity of 79.19 GiB of which 1.06 GiB is free.\n"
)


def test_an_own_line_before_a_real_oom_leaves_the_oom_on_top() -> None:
    found = diagnose_text(OWN + OOM)
    assert found.top is not None and found.top.category == "cuda_oom"
    assert all(f.category != "flash_attn_runtime" for f in found.findings)


def test_a_library_saying_the_same_is_still_a_finding() -> None:
    """Outside our own prefix the same words are transformers' failure: still diagnosed."""
    text = "ImportError: FlashAttention2 has been toggled on, but it cannot be used\n"
    found = diagnose_text(text)
    assert found.top is not None and found.top.category == "flash_attn_runtime"


def test_the_attempt_record_names_the_oom_the_fallback_acts_on() -> None:
    run_dir = create_run_dir("own-lines", "host")
    record = begin_attempt(run_dir, "launch")
    (run_dir / LOG).write_text("starting\n" + OWN + "step 1\n" + OOM, encoding="utf-8")
    ended = end_attempt(run_dir, record["attempt"], 1, "exit code 1")
    assert ended["diagnosis_category"] == "cuda_oom", ended
