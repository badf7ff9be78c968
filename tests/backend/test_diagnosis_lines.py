"""Hand-written lines per category, in the exact form each component prints them."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from backend.diagnosis import classify_line, diagnose_stream, diagnose_text

LINES = [
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
        "capacity of 79.10 GiB of which 1.2 GiB is free.",
        "cuda_oom",
    ),
    ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
    (
        "[rank3]: RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        "cuda_oom",
    ),
    (
        "ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
        "undefined symbol: _ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE",
        "flash_attn_runtime",
    ),
    ("RuntimeError: FlashAttention only supports Ampere GPUs or newer.", "flash_attn_runtime"),
    (
        "RuntimeError: FlashAttention is only supported on CUDA 11.6 and above.",
        "flash_attn_runtime",
    ),
    (
        "ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the following "
        "error: the package flash_attn seems to be not installed.",
        "flash_attn_runtime",
    ),
    (
        "RuntimeError: CUDA Setup failed despite GPU being available. Please run the following "
        "command to get more information:",
        "bitsandbytes_cuda",
    ),
    (
        "UserWarning: The installed version of bitsandbytes was compiled without GPU support. "
        "8-bit optimizers, 8-bit multiplication, and GPU quantization are unavailable.",
        "bitsandbytes_cuda",
    ),
    ("RuntimeError: Error building extension 'cpu_adam'", "deepspeed_op_build"),
    (
        "deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable "
        "to compile CUDA op(s)",
        "deepspeed_op_build",
    ),
    ("  ERROR: Failed building wheel for flash-attn", "flash_attn_build"),
    (
        "      OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
        "flash_attn_build",
    ),
    ("g++: fatal error: Killed signal terminated program cc1plus", "flash_attn_build"),
    (
        "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800123 milliseconds",
        "nccl",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:219, "
        "internal error - please report this issue to the NCCL developers, NCCL version 2.19.3",
        "nccl",
    ),
    (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
        "memory (shm).",
        "shm",
    ),
    (
        "node1:123:456 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device",
        "shm",
    ),
    (
        "torch.distributed.elastic.multiprocessing.api:failed (exitcode: -7) local_rank: 0 (pid: 1)",
        "shm",
    ),
    (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
        "address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",
        "port_in_use",
    ),
    ("OSError: [Errno 98] Address already in use", "port_in_use"),
    ("  exitcode  : -9 (pid: 4628)", "host_oom"),
    (
        "[Tue Nov 30 03:00:00 2026] Out of memory: Killed process 4242 (python) total-vm:900000000kB",
        "host_oom",
    ),
    ("Killed", "host_oom"),
    ("[12.3] Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB", "host_oom"),
    (
        "docker: Error response from daemon: failed to create task for container: failed to create "
        "shim task: OCI runtime create failed: runc create failed: unable to start container process: "
        "error during container init: error running hook #0: error running hook: exit status 1, stdout: "
        ", stderr: nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: "
        "cannot open shared object file: no such file or directory: unknown.",
        "docker_gpu",
    ),
    (
        "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device",
        "disk_full",
    ),
    (
        'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
        "docker_gpu",
    ),
    ("docker: Error response from daemon: unknown or invalid runtime name: nvidia.", "docker_gpu"),
    ("Failed to initialize NVML: Driver/library version mismatch", "driver_mismatch"),
    (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040). Please update "
        "your GPU driver.",
        "driver_mismatch",
    ),
    (
        "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your "
        "driver to a newer version",
        "driver_mismatch",
    ),
    (
        "docker: Error response from daemon: failed to create shim task: OCI runtime create failed: runc "
        "create failed: unable to start container process: error during container init: error setting "
        "rlimits for ready process: error setting rlimit type 8: operation not permitted: unknown",
        "container_permission",
    ),
    ("WARNING: tokenization mismatch: 903 vs. 902. #turn = 3. (ignored)", "tokenization_mismatch"),
    ("OSError: [Errno 28] No space left on device: '/data/output/checkpoint-1200'", "disk_full"),
    (
        "RuntimeError: [enforce fail at inline_container.cc:595] . PytorchStreamWriter failed writing file "
        "data/3: file write failed",
        "disk_full",
    ),
    (
        "ValueError: Some specified arguments are not used by the HfArgumentParser: "
        "['--evaluation_strategy', 'steps']",
        "hf_args",
    ),
    (
        "TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'eval_strategy'",
        "hf_args",
    ),
]

BENIGN = [
    "{'loss': 1.3491, 'learning_rate': 1.2045437948275952e-08, 'epoch': 0.98}",
    " 45%|████▌     | 450/1000 [10:01<12:13,  1.33s/it]",
    "node1:97:183 [0] NCCL INFO Channel 00/02 :    0   1",
    "node1:97:183 [0] NCCL INFO transport/shm.cc:101 -> 2",
    "/x/transformers/training_args.py:1525: FutureWarning: `evaluation_strategy` is deprecated and will "
    "be removed in version 4.46 of Transformers. Use `eval_strategy` instead",
    "Some weights of LlamaForCausalLM were not initialized from the model checkpoint at x and are newly "
    "initialized: ['lm_head.weight']",
    "[rank0]:[W1130 03:32:28.242422870 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
    "was not called before program exit, which can leak resources.",
    "Sending process 57249 closing signal SIGTERM",
    "{'train_runtime': 74.66, 'train_samples_per_second': 0.214, 'epoch': 0.04}",
    "  warnings.warn(",
    "[2023-11-19 01:50:01,333] [INFO] [comm.py:622:init_distributed] Initializing TorchBackend in "
    "DeepSpeed with backend nccl",
]


@pytest.mark.parametrize(
    ("line", "category"), LINES, ids=[c + str(i) for i, (_, c) in enumerate(LINES)]
)
def test_classify_line(line: str, category: str) -> None:
    flag = classify_line(line)
    assert flag is not None and flag.category == category, flag


@pytest.mark.parametrize(
    ("line", "category"), LINES, ids=[c + str(i) for i, (_, c) in enumerate(LINES)]
)
def test_diagnose_single_line(line: str, category: str) -> None:
    top = diagnose_text(f"starting\n{line}\ndone\n").top
    assert top is not None and top.category == category and top.line == 2


@pytest.mark.parametrize("line", BENIGN)
def test_alarming_but_benign_lines(line: str) -> None:
    flag = classify_line(line)
    assert flag is None or flag.severity != "error", flag
    assert not diagnose_text(line + "\n").has_error


def test_hard_wrapped_port_message() -> None:
    text = (
        "RuntimeError: The server socket has failed to listen on any local network\n"
        "address. The server socket has failed to bind to [::]:29600 (errno: 98 - Address\n"
        "already in use).\n"
    )
    top = diagnose_text("x\n" + text).top
    assert top is not None and top.category == "port_in_use" and top.line == 2


def test_tqdm_carriage_returns_and_rank_prefix() -> None:
    text = (
        " 10%|#   | 1/10 [00:01<00:09, 1.0s/it]\r 20%|##  | 2/10 [00:02<00:08, 1.0s/it]"
        "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
    )
    top = diagnose_text("a\nb\n" + text).top
    assert top is not None and top.category == "cuda_oom" and top.line == 3
    assert top.text.startswith("[rank1]: torch.OutOfMemoryError")


def test_root_cause_before_symptom_even_when_later() -> None:
    text = (
        "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout\n"
        "  exitcode  : -9 (pid: 7)\n"
        "host: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
    )
    cats = [f.category for f in diagnose_text(text).findings]
    assert cats == ["cuda_oom", "host_oom", "nccl"]


def test_oom_inside_save_traceback_is_fsdp_save_oom() -> None:
    text = (
        '  File "fastchat/train/train.py", line 290, in safe_save_model_for_hf_trainer\n'
        "    cpu_state_dict = trainer.model.state_dict()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 500.00 MiB\n"
    )
    top = diagnose_text(text).top
    assert top is not None and top.category == "fsdp_save_oom"


def test_no_module_torch_is_a_build_failure_only_while_pip_builds() -> None:
    build = (
        "Collecting flash-attn\n  Getting requirements to build wheel: started\n"
        "      ModuleNotFoundError: No module named 'torch'\n"
    )
    top = diagnose_text(build).top
    assert top is not None and top.category == "flash_attn_build"
    assert diagnose_text("ModuleNotFoundError: No module named 'torch'\n").top is None


def test_repeated_tokenization_mismatch_becomes_error() -> None:
    one = diagnose_text("WARNING: tokenization mismatch: 10 vs. 11. (ignored)\n")
    many = diagnose_text("WARNING: tokenization mismatch: 10 vs. 11. (ignored)\n" * 6)
    assert one.findings[0].severity == "warning" and many.findings[0].severity == "error"
    assert many.findings[0].count == 6


def test_streaming_across_block_boundaries_with_bounded_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import backend.diagnosis.classifier as classifier

    monkeypatch.setattr(classifier, "BLOCK", 97)  # odd size: lines and windows straddle blocks
    filler = "{'loss': 1.0, 'learning_rate': 2e-05, 'epoch': 0.1}\n"
    parts = [filler * 30]
    for _ in range(200):
        parts.append("WARNING: tokenization mismatch: 5 vs. 6. (ignored)\n" + filler * 3)
    parts.append(
        "RuntimeError: The server socket has failed to listen on any local network\n"
        "address. (errno: 98 - Address\nalready in use).\n"
    )
    text = "".join(parts)
    port_line = text[: text.index("RuntimeError: The server")].count("\n") + 1
    diagnosis = diagnose_stream(io.BytesIO(text.encode()))
    by_cat = {f.category: f for f in diagnosis.findings}
    assert by_cat["tokenization_mismatch"].count == 200
    assert len(by_cat["tokenization_mismatch"].lines) == classifier.MAX_LINES
    assert by_cat["port_in_use"].line == port_line
    assert diagnosis.lines_read == text.count("\n")


def test_cancel_stops_reading() -> None:
    cancel = threading.Event()
    cancel.set()
    diagnosis = diagnose_stream(io.BytesIO(b"CUDA out of memory\n"), cancel=cancel)
    assert diagnosis.findings == [] and diagnosis.bytes_read == 0


def test_crash_outranks_data_warnings_seen_earlier() -> None:
    text = "WARNING: tokenization mismatch: 10 vs. 11. (ignored)\n" * 6 + (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB\n"
    )
    cats = [f.category for f in diagnose_text(text).findings]
    assert cats == ["cuda_oom", "tokenization_mismatch"]


def test_new_oom_message_format_is_explained() -> None:
    line = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 172.00 MiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 5.06 MiB is free. Process 12 has 79.14 GiB memory "
        "in use. Of the allocated memory 77.50 GiB is allocated by PyTorch, and 1.10 GiB is "
        "reserved by PyTorch but unallocated."
    )
    top = diagnose_text(line + "\n").top
    assert top is not None and top.category == "cuda_oom"
    assert "0.17 GiB more on a 79.2 GiB GPU" in top.explanation
    assert top.fixes[0].title == "Let the allocator expand segments"  # 1.1 GiB free but fragmented


def test_progress_reports_bytes_up_to_the_file_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import backend.diagnosis.classifier as classifier
    from backend.diagnosis import diagnose_file

    monkeypatch.setattr(classifier, "BLOCK", 1000)
    log = tmp_path / "train.log"
    log.write_text("{'loss': 1.0}\n" * 1000 + "RuntimeError: CUDA error: out of memory\n")
    seen: list[tuple[int, int | None]] = []
    diagnosis = diagnose_file(log, progress=lambda done, total: seen.append((done, total)))
    size = log.stat().st_size
    assert [d for d, _ in seen] == sorted(d for d, _ in seen) and seen[-1] == (size, size)
    assert len(seen) > 10
    assert diagnosis.top is not None and diagnosis.top.line == 1001
