"""Failure signatures, written from the messages the failing component itself prints.

Each pattern quotes a message PyTorch, NCCL, Docker/runc, the NVIDIA container toolkit, pip,
the kernel or the shell emits for one mechanism, so that logs nobody here has seen are still
recognised. ``anchors`` are literal substrings, one of which every match contains: the scanner
looks for anchors first (fast, C speed over big blocks) and runs the patterns only on the few
lines that hold one. Order matters: within a line the first matching signature wins, so the
more specific cause (``shm`` before ``disk_full``, ``driver_mismatch`` before ``docker_gpu``)
comes first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from backend.diagnosis.model import Severity

# Tier: 0 root cause of a crash, 1 likely consequence of something else, 2 pure symptom, 3 not
# a crash at all (training goes on, badly). Sorting puts lower tiers first among findings of
# equal severity ("root causes win over symptoms").
TIERS: dict[str, int] = {"host_oom": 1, "nccl": 2, "tokenization_mismatch": 3}


@dataclass(frozen=True)
class Signature:
    category: str
    severity: Severity
    title: str
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]
    window: int = 0  # following lines joined to this one (hard-wrapped messages)
    needs: tuple[str, int] | None = None  # (context name, within N lines before)


@dataclass(frozen=True)
class Marker:
    """A line that is no failure itself but tells the phase (saving, pip building)."""

    context: str
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]


def _sig(
    category: str,
    severity: Severity,
    title: str,
    pattern: str,
    anchors: tuple[str, ...],
    *,
    window: int = 0,
    needs: tuple[str, int] | None = None,
    flags: int = 0,
) -> Signature:
    return Signature(category, severity, title, re.compile(pattern, flags), anchors, window, needs)


_EXIT = r"(?:exitcode|exit code|return code|returncode|exit status)\s*[:=]?\s*"

SIGNATURES: tuple[Signature, ...] = (
    # --- shared memory (before disk_full and nccl: a full /dev/shm is the root cause) ---
    _sig(
        "shm",
        "error",
        "Shared memory (/dev/shm) too small",
        r"insufficient shared memory|Unexpected bus error encountered in worker"
        r"|killed by signal: Bus error|Signal 7 \(SIGBUS\)|" + _EXIT + r"-7\b",
        ("shared memory", "us error", "SIGBUS", ": -7", "= -7", "=-7", "code -7", "status -7"),
    ),
    _sig(
        "shm",
        "error",
        "NCCL could not create a shared-memory segment",
        r"NCCL WARN.*(?:shm|shared memory)|Error while creating shared memory segment"
        r"|posix_fallocate failed|/dev/shm\b.*(?:No space left|Bus error|too small)"
        r"|(?:No space left on device|Bus error).*/dev/shm",
        ("NCCL WARN", "shared memory", "posix_fallocate", "/dev/shm"),
    ),
    # --- multi-node: an agent that never joined torchrun's rendezvous (issue 18) ---
    _sig(
        "rendezvous_timeout",
        "error",
        "A node never joined the rendezvous",
        r"RendezvousTimeoutError|rendezvous timeout after",
        ("RendezvousTimeoutError", "rendezvous timeout"),
    ),
    # --- ports ---
    _sig(
        "port_in_use",
        "error",
        "The rendezvous port is already in use",
        r"Address already in use|EADDRINUSE|\[Errno 98\]|errno:?\s*98\b|port is already allocated"
        r"|failed to (?:listen|bind)\b.{0,300}?(?:errno:?\s*98|Address\s+already\s+in\s+use)",
        (
            "already in use",
            "EADDRINUSE",
            "rrno 98",
            "rrno: 98",
            "rrno:98",
            "already allocated",
            "failed to listen",
            "failed to bind",
        ),
        window=3,
    ),
    # --- GPU memory ---
    _sig(
        "cuda_oom",
        "error",
        "CUDA out of memory",
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
        r"|CUDNN_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|HIP out of memory",
        ("out of memory", "OutOfMemoryError", "ALLOC_FAILED", "cudaErrorMemoryAllocation"),
    ),
    # --- flash-attn at run time ---
    _sig(
        "flash_attn_runtime",
        "error",
        "flash-attn does not match this torch build",
        r"flash_attn\S*: undefined symbol|undefined symbol.*flash_attn",
        ("undefined symbol",),
    ),
    _sig(
        "flash_attn_runtime",
        "error",
        "FlashAttention is not supported on this GPU",
        r"FlashAttention only supports (?:Ampere|Turing)|FlashAttention .{0,40}(?:only supported|"
        r"requires).{0,40}(?:Ampere|sm_?8|sm8x|compute capability)",
        ("FlashAttention",),
    ),
    _sig(
        "flash_attn_runtime",
        "error",
        "FlashAttention needs a newer CUDA",
        r"FlashAttention (?:is )?only supported on CUDA \d|flash.attn.{0,40}requires CUDA \d",
        ("FlashAttention", "flash_attn", "flash-attn"),
    ),
    _sig(
        "flash_attn_runtime",
        "error",
        "flash-attn is requested but not installed",
        r"FlashAttention2 has been toggled on, but it cannot be used|package flash_attn seems to be not"
        r" installed|No module named '?flash_attn",
        ("FlashAttention2", "flash_attn"),
    ),
    # --- LoRA/QLoRA/ZeRO stacks (issue 21): bitsandbytes' CUDA setup, DeepSpeed's JIT ops ---
    _sig(
        "bitsandbytes_cuda",
        "error",
        "bitsandbytes cannot use CUDA (QLoRA)",
        r"CUDA Setup failed despite GPU being available|bitsandbytes was compiled without GPU "
        r"support|libbitsandbytes_cpu\.so|bitsandbytes.{0,80}(?:CUDA SETUP|cannot find|not find).{0,40}"
        r"(?:libcudart|CUDA)",
        ("CUDA Setup failed", "bitsandbytes"),
    ),
    _sig(
        "deepspeed_op_build",
        "error",
        "DeepSpeed could not build one of its CUDA/C++ ops",
        r"Error building extension '(?:cpu_adam|fused_adam|cpu_adagrad|cpu_lion|fused_lamb|"
        r"utils|async_io|transformer_inference|quantizer)'|CUDA_HOME does "
        r"not exist, unable to compile CUDA op|DeepSpeed Op Builder: Installed CUDA version",
        (
            "Error building extension",
            "CUDA_HOME does not exist",
            "Op Builder",
        ),
    ),
    # --- building flash-attn (or any torch CUDA extension) ---
    _sig(
        "flash_attn_build",
        "error",
        "flash-attn failed to build",
        r"Failed (?:building wheel for|to build) flash[-_]attn|Could not build wheels for flash[-_]attn",
        ("Failed building wheel", "Failed to build", "Could not build wheels"),
    ),
    _sig(
        "flash_attn_build",
        "error",
        "No CUDA compiler (nvcc) in this image",
        r"nvcc was not found|nvcc: (?:command )?not found|CUDA_HOME environment variable is not set"
        r"|No CUDA runtime is found|unable to execute '?nvcc'?",
        ("nvcc", "CUDA_HOME", "No CUDA runtime"),
    ),
    _sig(
        "flash_attn_build",
        "error",
        "The compiler ran out of memory",
        r"Killed signal terminated program (?:cc1plus|cicc|ptxas)|(?:cc1plus|cicc|ptxas).{0,40}Killed",
        ("Killed",),
    ),
    _sig(
        "flash_attn_build",
        "error",
        "A CUDA extension failed to compile",
        r"Error compiling objects for extension|ninja: build stopped: subcommand failed"
        r"|The detected CUDA version \(.*\) mismatches the version that was used to compile PyTorch",
        ("Error compiling objects", "ninja: build stopped", "mismatches the version"),
    ),
    _sig(
        "flash_attn_build",
        "error",
        "pip built flash-attn without torch (build isolation)",
        r"No module named '?torch'?(?![\w.])",
        ("No module named",),
        needs=("pip_build", 120),
    ),
    # --- NVIDIA driver and container toolkit ---
    _sig(
        "driver_mismatch",
        "error",
        "NVIDIA driver and library versions differ",
        r"(?i)driver/library version mismatch",
        ("library version mismatch", "Library version mismatch"),
    ),
    _sig(
        "driver_mismatch",
        "error",
        "The NVIDIA driver is too old for this CUDA",
        r"NVIDIA driver on your system is too old|CUDA driver version is insufficient for CUDA runtime"
        r"|cudaErrorInsufficientDriver|unsatisfied condition: cuda\s*>="
        r"|forward compatibility was attempted on non supported HW"
        r"|unsupported display driver / cuda driver combination",
        ("river", "rror"),  # each message names the driver or is printed as an error
    ),
    _sig(
        "docker_gpu",
        "error",
        "Docker cannot give GPUs to containers",
        r'could not select device driver ".*?" with capabilities: \[\[gpu\]\]'
        r"|unknown or invalid runtime name: nvidia|[Uu]nknown runtime specified nvidia"
        r"|nvidia-container-cli: (?:initialization|mount|detection) error"
        r"|Failed to initialize NVML: Unknown Error",
        ("device driver", "runtime", "error", "Failed to initialize NVML"),
    ),
    # --- container options the host refuses ---
    _sig(
        "container_permission",
        "error",
        "The host refused a container option",
        r"(?i)(?:error setting rlimit|unable to apply caps|apply capabilities|setrlimit).{0,200}"
        r"(?:operation not permitted|permission denied)"
        r"|(?:OCI runtime create failed|failed to create shim task).{0,400}operation not permitted",
        ("not permitted", "ermission denied", "NOT PERMITTED"),
    ),
    _sig(
        "container_permission",
        "warning",
        "A resource limit could not be raised",
        r"ulimit: .{0,60}cannot modify limit: Operation not permitted",
        ("not permitted",),
    ),
    # --- disk ---
    _sig(
        "disk_full",
        "error",
        "The disk is full",
        r"No space left on device|\[Errno 28\]|os error 28|\bENOSPC\b|Disk quota exceeded|\bEDQUOT\b"
        r"|PytorchStreamWriter failed writing file",
        (
            "No space left",
            "rrno 28",
            "os error 28",
            "ENOSPC",
            "quota exceeded",
            "EDQUOT",
            "PytorchStreamWriter failed",
        ),
    ),
    # --- arguments the installed transformers no longer (or not yet) accepts ---
    _sig(
        "hf_args",
        "error",
        "transformers rejected a training argument",
        r"arguments are not used by the HfArgumentParser: \[(?P<args>[^\]]*)\]"
        r"|TrainingArguments\.__init__\(\) got an unexpected keyword argument '(?P<kw>\w+)'"
        r"|error: unrecognized arguments: (?P<unrec>.+)",
        ("HfArgumentParser", "unexpected keyword argument", "unrecognized arguments"),
    ),
    # --- FastChat data ---
    _sig(
        "tokenization_mismatch",
        "warning",
        "FastChat's masking does not match the tokenizer",
        r"tokenization mismatch: \d+ vs\. ?\d+",
        ("tokenization mismatch",),
    ),
    # --- host memory: the kernel's OOM killer ---
    _sig(
        "host_oom",
        "error",
        "A training process was killed (SIGKILL), usually the host out of RAM",
        _EXIT
        + r"-9\b|Signal 9 \(SIGKILL\)|[Oo]ut of memory: Kill(?:ed)? process|invoked oom-killer"
        r"|oom-kill:|exited with code 137\b|exit (?:code|status) 137\b|\"OOMKilled\":\s*true|^\s*Killed\s*$",
        (
            ": -9",
            "= -9",
            "=-9",
            "code -9",
            "status -9",
            "SIGKILL",
            "Out of memory",
            "oom-kill",
            "code 137",
            "status 137",
            "OOMKilled",
            "Killed",
        ),
    ),
    # --- NCCL (symptom: look for a root cause first) ---
    _sig(
        "nccl",
        "error",
        "An NCCL collective timed out",
        r"Watchdog caught collective operation timeout|collective operation timeout"
        r"|NCCL communicator was aborted|NCCL timeout",
        ("collective operation timeout", "NCCL communicator", "NCCL timeout"),
    ),
    _sig(
        "nccl",
        "error",
        "NCCL failed",
        r"NCCL error\b|nccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error"
        r"|DistBackendError",
        ("NCCL error", "Error"),
    ),
    _sig("nccl", "warning", "NCCL warning", r"NCCL WARN\b", ("NCCL WARN",)),
)

MARKERS: tuple[Marker, ...] = (
    # Traceback frames of checkpoint saving (function names, torch's FSDP state-dict module):
    # an OOM message right after them happened while saving. Deprecation warnings that merely
    # mention state_dict do not count.
    Marker(
        "save",
        re.compile(
            r"line \d+, in \w*(?:save|state_dict)\w*|_state_dict_utils\.py\", line \d+, in "
        ),
        (", in ",),
    ),
    # HF Trainer prints its final metrics after the last step, before saving the model.
    Marker("train_done", re.compile(r"['\"]train_runtime['\"]\s*:"), ("train_runtime",)),
    # pip building a package from source.
    Marker(
        "pip_build",
        re.compile(
            r"Getting requirements to build wheel|Preparing metadata \(|Building wheel for"
            r"|Running setup\.py|pip-install-|pip-build-env|setup\.py\b.*egg_info|Collecting flash"
        ),
        (
            "requirements to build",
            "Preparing metadata",
            "Building wheel",
            "setup.py",
            "pip-install-",
            "pip-build-env",
            "Collecting flash",
        ),
    ),
)


# What the scanner searches blocks for: short substrings that every signature and marker anchor
# contains (checked below), so a block costs ~45 fast scans however many signatures there are.
SCAN_ANCHORS: tuple[str, ...] = (
    "emory", "rror", "ailed", "-7", "-9", " 137", "Kill", "KILL", "oom-kill", "SIGBUS", "in use",
    "INUSE", "rrno", "already allocated", "ALLOC_FAILED", "lash", "undefined symbol", "nvcc",
    "CUDA_HOME", "No module named", "No space left", "uild", "setup.py", "Preparing metadata",
    "pip-install-", "mismatch", "NCCL WARN", "NCCL comm", "timeout", "rgument", "river",
    "runtime", "permitted", "ermission denied", "PERMITTED", "os error", "ENOSPC", "quota",
    "EDQUOT", ", in ", "/dev/shm", "posix_fallocate", "itsandbytes",
)  # fmt: skip


def anchor_index() -> tuple[list[str], list[frozenset[int]], list[frozenset[int]]]:
    """The scan anchors and, per anchor, the indexes of the signatures and markers that may
    match a line holding it (those with an anchor containing it)."""
    every = {a for s in SIGNATURES for a in s.anchors} | {a for m in MARKERS for a in m.anchors}
    uncovered = sorted(a for a in every if not any(scan in a for scan in SCAN_ANCHORS))
    if uncovered:
        raise AssertionError(f"anchors not covered by SCAN_ANCHORS: {uncovered}")
    scan = list(SCAN_ANCHORS)
    sigs = [
        frozenset(i for i, s in enumerate(SIGNATURES) if any(a in x for x in s.anchors))
        for a in scan
    ]
    marks = [
        frozenset(i for i, m in enumerate(MARKERS) if any(a in x for x in m.anchors)) for a in scan
    ]
    return scan, sigs, marks
