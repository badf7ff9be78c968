"""Shapes taught after logcorpus6's first measurement, on lines written here from each
component's own message format (not the corpora's lines): DeepSpeed's, transformers' and
accelerate's config checks, a chat template's own error, NCCL's CUDA OOM and socket calls,
torch.save's unopenable file, the HF metrics block, the shell's EACCES, pip's and uv's failed
flash-attn builds, and the fault signals and cut tracebacks that end a log."""

from __future__ import annotations

import pytest

from backend.diagnosis import diagnose_text

CASES = [
    ("deepspeed_config", "AssertionError: Gradient accumulation steps: 0 has to be greater than 0"),
    (
        "deepspeed_config",
        "ValueError: Please correct the following DeepSpeed config values that mismatch "
        "TrainingArguments values:\n- ds gradient_accumulation_steps=8 vs hf "
        "gradient_accumulation_steps=2",
    ),
    (
        "deepspeed_config",
        "ValueError: Please specify the ZeRO optimization config in the DeepSpeed config.",
    ),
    (
        "deepspeed_config",
        '  File "/opt/venv/lib/python3.10/site-packages/deepspeed/runtime/engine.py", line 90, '
        "in step\n    if self.gradient_clipping() > 0.0:\n"
        "TypeError: '>' not supported between instances of 'str' and 'float'",
    ),
    (
        "hf_args",
        "ValueError: --load_best_model_at_end requires the save and eval strategy to match, "
        "but found\n- Evaluation strategy: steps\n- Save strategy: epoch",
    ),
    (
        "chat_template",
        "jinja2.exceptions.TemplateError: System role not supported",
    ),
    ("cuda_oom", "node7:123:456 [2] include/alloc.h:99 NCCL WARN Cuda failure 2 'out of memory'"),
    (
        "disk_full",
        '  File "/usr/lib/python3/site-packages/torch/serialization.py", line 650, in save\n'
        "RuntimeError: File /ckpt/run1/model.pt cannot be opened.",
    ),
    ("loss_nan", "***** eval metrics *****\n  epoch        =   2.0\n  eval_loss    =   nan"),
    ("container_permission", "bash: /home/dev/.profile: Permission denied"),
    (
        "nccl",
        "host:1:2 [1] include/socket.h 400 NCCL WARN Call to recv failed : Connection reset by peer",
    ),
    (
        "flash_attn_build",
        "Collecting flash-attn==2.7.0\n  Getting requirements to build wheel ... error\n"
        "  × Getting requirements to build wheel did not run successfully.",
    ),
    ("flash_attn_build", "  × Failed to download and build `flash-attn==2.7.4`"),
    ("unrecognised_failure", "step 12 ok\nSegmentation fault (core dumped)"),
    ("unrecognised_failure", "    row = record[\"label\"]\nKeyError: 'label'"),
]


@pytest.mark.parametrize(
    ("category", "log"), CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)]
)
def test_each_shape_gets_its_category_at_error_level(category: str, log: str) -> None:
    top = diagnose_text(log + "\n").top
    assert top is not None and top.severity == "error", top
    assert top.category == category, top
    assert top.explanation and (top.fixes or category == "unrecognised_failure")


LOOK_ALIKES = [
    # a string compared with a number outside DeepSpeed's runtime: not a DeepSpeed config
    "TypeError: '<' not supported between instances of 'str' and 'int'",
    # "cannot be opened" outside torch.save
    "RuntimeError: File data/train.bin cannot be opened.",
    # HF's metrics block with numbers
    "***** train metrics *****\n  train_loss               =     0.0063",
    # a bare exception line with no traceback above it (a library's printed message)
    "IndexError: index 12 is out of bounds for axis 0 with size 12",
]


@pytest.mark.parametrize("log", LOOK_ALIKES)
def test_look_alikes_are_not_errors(log: str) -> None:
    top = diagnose_text(log + "\n").top
    assert top is None or top.severity != "error", top


def test_nccl_attach_enoent_is_nccl_and_a_failed_create_stays_shm() -> None:
    attach = (
        "h:1:2 [0] misc/shmutils.cc:129 NCCL WARN Error while attaching to shared memory segment "
        "/dev/shm/nccl-abc (size 1024), error: No such file or directory (2)"
    )
    create = (
        "h:1:2 [0] misc/shmutils.cc:80 NCCL WARN Error while creating shared memory segment "
        "/dev/shm/nccl-abc (size 1024)"
    )
    top = diagnose_text(attach + "\n").top
    assert top is not None and (top.category, top.severity) == ("nccl", "error")
    assert "attach" in top.explanation
    top = diagnose_text(create + "\n").top
    assert top is not None and top.category == "shm"
