"""Failure signatures, written from the messages the failing component itself prints.

Each pattern quotes a message PyTorch, NCCL, Docker/runc, the NVIDIA container toolkit, pip,
the kernel or the shell emits for one mechanism, so that logs nobody here has seen are still
recognised. ``anchors`` are literal substrings, one of which every match contains: the scanner's
prefilter (``scan.py``) looks for them first and the patterns run only on the few lines that
hold one. Order matters: within a line the first matching signature wins, so the
more specific cause (``shm`` before ``disk_full``, ``driver_mismatch`` before ``docker_gpu``)
comes first.
"""

from __future__ import annotations

import re

from backend.diagnosis.sigbase import EXIT as _EXIT
from backend.diagnosis.sigbase import EXIT_ANCHORS as _EXIT_ANCHORS
from backend.diagnosis.sigbase import Marker, Signature
from backend.diagnosis.sigbase import sig as _sig
from backend.diagnosis.signatures_cluster import (
    CLUSTER_MARKERS,
    DEEPSPEED,
    NCCL_TRANSPORT,
    NETWORK,
    PEFT,
    SLURM,
    VERSIONS,
)
from backend.diagnosis.signatures_config import (
    CONFIG_MARKERS,
    DEEPSPEED_CONFIG,
    FLASH_PIP,
    HF_ARGS,
    MORE,
    TEMPLATE_ERRORS,
)
from backend.diagnosis.signatures_hw import (
    AMP,
    GPU_HARDWARE,
    HW_MARKERS,
    IO,
    KERNEL_FAULTS,
    NET_UNREACHABLE,
)
from backend.diagnosis.signatures_methods import EXTENSION_BUILDS, METHOD_MARKERS, METHODS
from backend.diagnosis.signatures_train import ARCH, FOLDERS, HUB, NAN, TEMPLATES, TRAIN_MARKERS
from backend.i18n import N_

# Tier: 0 root cause of a crash, 1 likely consequence of something else, 2 pure symptom, 3 not
# a crash at all (training goes on, badly). Sorting puts lower tiers first among findings of
# equal severity ("root causes win over symptoms"). An unrecognised failure (no category: only
# a quote of the log's last error, backend/diagnosis/unrecognised.py) comes after every known one.
TIERS: dict[str, int] = {
    "host_oom": 1,
    "nccl": 2,
    "tokenization_mismatch": 3,
    "unrecognised_failure": 4,
}

SIGNATURES: tuple[Signature, ...] = (
    # --- the GPU itself, then a kernel's fault: first, because NCCL's and the watchdog's lines
    # quote the CUDA error that ended a rank (a line names the fault, not the messenger) ---
    *GPU_HARDWARE,
    *KERNEL_FAULTS,
    # --- shared memory (before disk_full and nccl: a full /dev/shm is the root cause) ---
    _sig(
        "shm",
        "error",
        N_("Shared memory (/dev/shm) too small"),
        # torch's "Unexpected bus error encountered in worker", Paddle's SIGBUS handler's
        # "Unexpected BUS error encountered in DataLoader worker"
        r"Unexpected (?:bus|BUS) error encountered in (?:DataLoader )?worker"
        r"|killed by signal: Bus error|Signal 7 \(SIGBUS\)|" + _EXIT + r"-7\b",
        ("Unexpected bus error", "Unexpected BUS error", "Bus error", "SIGBUS", *_EXIT_ANCHORS),
    ),
    # torch moves DataLoader batches through /dev/shm files named /torch_<pid>_<n>; POSIX
    # semaphores (SemLock) live there too: ENOSPC from either is a full /dev/shm, not the disk.
    _sig(
        "shm",
        "error",
        N_("Shared memory (/dev/shm) is full"),
        r"unable to write to file </torch_|(?:/torch_|SemLock).{0,200}(?:No space left|Errno 28)"
        r"|(?:No space left on device|Errno 28).{0,200}(?:/torch_|SemLock)",
        ("</torch_", "No space left", "Errno 28"),
    ),
    _sig(
        "shm",
        "error",
        N_("Shared memory (/dev/shm) is full (a semaphore could not be created)"),
        r"No space left on device|\[Errno 28\]",
        ("No space left", "Errno 28"),
        needs=("semlock", 30),
    ),
    _sig(
        "shm",
        "error",
        N_("NCCL could not create a shared-memory segment"),
        # (not NCCL's ENOENT attaching to a peer's segment: that one exists nowhere, see MORE)
        r"NCCL WARN(?!.*attaching to shared memory segment .*No such file)"
        r".*(?:shm|shared memory)|Error while creating shared memory segment"
        r"|posix_fallocate failed|/dev/shm\b.*(?:No space left|Bus error|too small)"
        r"|(?:No space left on device|Bus error).*/dev/shm",
        ("NCCL WARN", "Error while creating", "posix_fallocate", "dev/shm"),
    ),
    *SLURM,
    *NETWORK,  # name resolution, ssh, the c10d store, accelerate's port check
    # --- multi-node: an agent that never joined torchrun's rendezvous ---
    _sig(
        "rendezvous_timeout",
        "error",
        N_("A node never joined the rendezvous"),
        r"RendezvousTimeoutError|rendezvous timeout after",
        ("RendezvousTimeoutError", "rendezvous timeout"),
    ),
    # --- ports ---
    _sig(
        "port_in_use",
        "error",
        N_("The rendezvous port is already in use"),
        r"Address already in use|EADDRINUSE|errno:?\s*98 - Address|Bind for \S+ failed: port is already allocated"
        r"|failed to (?:listen|bind)\b.{0,300}?(?:errno:?\s*98|Address\s+already\s+in\s+use)",
        (
            "Address",
            "EADDRINUSE",
            "Bind for",
            "failed to listen",
            "failed to bind",
        ),
        window=3,
    ),
    # --- GPU memory ---
    _sig(
        "cuda_oom",
        "error",
        N_("CUDA out of memory"),
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED"
        r"|CUDNN_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation|HIP out of memory",
        (
            "CUDA out of memory",
            "CUDA error: out of memory",
            "HIP out of memory",
            "OutOfMemoryError",
            "ALLOC_FAILED",
            "cudaErrorMemoryAllocation",
        ),
    ),
    # --- flash-attn at run time ---
    _sig(
        "flash_attn_runtime",
        "error",
        N_("flash-attn does not match this torch build"),
        r"flash_attn\S*: undefined symbol|undefined symbol.*flash_attn",
        ("undefined symbol",),
    ),
    _sig(
        "flash_attn_runtime",
        "error",
        N_("FlashAttention is not supported on this GPU"),
        r"FlashAttention only supports (?:Ampere|Turing)|FlashAttention .{0,40}(?:only supported|"
        r"requires).{0,40}(?:Ampere|sm_?8|sm8x|compute capability)",
        ("FlashAttention",),
    ),
    # flash-attn's setup.py says the same while pip builds it: the build is what failed.
    _sig(
        "flash_attn_build",
        "error",
        N_("flash-attn's build needs a newer CUDA (nvcc)"),
        r"FlashAttention (?:is )?only supported on CUDA \d",
        ("FlashAttention",),
        needs=("pip_build", 120),
    ),
    _sig(
        "flash_attn_runtime",
        "error",
        N_("FlashAttention needs a newer CUDA"),
        r"FlashAttention (?:is )?only supported on CUDA \d|flash.attn.{0,40}requires CUDA \d",
        ("FlashAttention", "flash_attn", "flash-attn"),
    ),
    _sig(
        "flash_attn_runtime",
        "error",
        N_("flash-attn is requested but not installed"),
        r"FlashAttention2 has been toggled on, but it cannot be used|package flash_attn seems to be not"
        r" installed|No module named '?flash_attn",
        ("FlashAttention2", "flash_attn"),
    ),
    *ARCH,
    *DEEPSPEED,  # config checks, and ninja under a DeepSpeed op build
    *DEEPSPEED_CONFIG,  # DeepSpeed's, transformers' and accelerate's checks of the config
    *METHODS,  # LoRA/QLoRA/ZeRO: bitsandbytes, DeepSpeed op builds (before flash-attn's)
    *EXTENSION_BUILDS,  # flash-attn (or any torch CUDA extension) built by pip
    *FLASH_PIP,  # a build hook failing while pip builds flash-attn
    *HUB,
    *PEFT,
    *VERSIONS,  # version mismatches, chat templates
    *TEMPLATE_ERRORS,  # a chat template refusing the conversation
    # --- NVIDIA driver and container toolkit ---
    _sig(
        "driver_mismatch",
        "error",
        N_("NVIDIA driver and library versions differ"),
        r"(?i)driver/library version mismatch",
        ("library version mismatch", "Library version mismatch"),
    ),
    _sig(
        "driver_mismatch",
        "error",
        N_("The NVIDIA driver is too old for this CUDA"),
        r"NVIDIA driver on your system is too old|CUDA driver version is insufficient for CUDA runtime"
        r"|cudaErrorInsufficientDriver|unsatisfied condition: cuda\s*>="
        r"|forward compatibility was attempted on non supported HW",
        (
            "NVIDIA driver",
            "CUDA driver version",
            "InsufficientDriver",
            "unsatisfied condition",
            "HW",
        ),
    ),
    _sig(
        "docker_gpu",
        "error",
        N_("Docker cannot give GPUs to containers"),
        r'could not select device driver ".*?" with capabilities: \[\[gpu\]\]'
        r"|unknown or invalid runtime name: nvidia|Unknown runtime specified nvidia"
        r"|nvidia-container-cli: (?:initialization|mount|detection) error"
        r"|Failed to initialize NVML: Unknown Error",
        (
            "select device driver",
            "invalid runtime name",
            "Unknown runtime specified",
            "nvidia-container-cli",
            "NVML: Unknown",
        ),
    ),
    # --- container options the host refuses ---
    _sig(
        "container_permission",
        "error",
        N_("The host refused a container option"),
        r"(?i)(?:error setting rlimit|unable to apply caps|apply capabilities|setrlimit).{0,200}"
        r"(?:operation not permitted|permission denied)"
        r"|(?:OCI runtime create failed|failed to create shim task).{0,400}operation not permitted",
        # docker/containerd put "OCI runtime create failed" on the same line; crun says RLIMIT_
        ("OCI runtime", "RLIMIT", "Operation not permitted", "OPERATION NOT PERMITTED"),
    ),
    _sig(
        "container_permission",
        "warning",
        N_("A resource limit could not be raised"),
        r"ulimit: .{0,60}cannot modify limit: Operation not permitted",
        ("Operation not permitted",),
    ),
    *FOLDERS,  # a folder the run writes to that another user owns
    *IO,  # EIO, ESTALE, EROFS: the storage failed (before disk_full's ENOSPC)
    *AMP,  # fp16 AMP on fp16 weights
    # --- disk ---
    _sig(
        "disk_full",
        "error",
        N_("The disk is full"),
        r"No space left on device|\[Errno 28\]|os error 28|StorageFull|\bENOSPC\b|Disk quota exceeded|\bEDQUOT\b"
        r"|PytorchStreamWriter failed writing file",
        (
            "No space left",
            "Errno 28",
            "StorageFull",
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
        N_("transformers rejected a training argument"),
        r"(?:arguments|keys) are not used by the HfArgumentParser: \[(?P<args>[^\]]*)\]"
        r"|TrainingArguments\.__init__\(\) got an unexpected keyword argument '(?P<kw>\w+)'"
        r"|error: unrecognized arguments: (?P<unrec>.+)",
        ("HfArgumentParser", "unexpected keyword argument", "unrecognized arguments"),
    ),
    *HF_ARGS,  # TrainingArguments' own consistency checks
    # --- FastChat data ---
    *TEMPLATES,
    _sig(
        "tokenization_mismatch",
        "warning",
        N_("FastChat's masking does not match the tokenizer"),
        r"tokenization mismatch: \d+ vs\. ?\d+",
        ("tokenization mismatch",),
    ),
    *NAN,
    *MORE,  # NCCL's CUDA OOM, torch.save's unopenable file, HF's metrics block, the shell's EACCES
    # --- host memory: the kernel's OOM killer ---
    _sig(
        "host_oom",
        "error",
        N_("A training process was killed (SIGKILL), usually the host out of RAM"),
        _EXIT
        + r"-9\b|Signal 9 \(SIGKILL\)|[Oo]ut of memory: Kill(?:ed)? process|invoked oom-killer"
        r"|exited with code 137\b|exit (?:code|status) 137\b|\"OOMKilled\":\s*true"
        # the shell's "Killed", alone or right after a progress bar ("Loading checkpoint shards")
        r"|(?:^|\])\s*Killed\s*$|DataLoader worker \(pid[^)]*\) is killed by signal: Killed"
        # bash's job report ("line 1: 4321 Killed  python ..."), zsh's, slurm's cgroup OOM
        r"|\b\d+ Killed\s+\S|zsh: killed\b|Detected \d+ oom[-_]kill event"
        # bash in a Chinese locale says 已杀死; srun names the task the cgroup OOM killer hit
        r"|(?:^|\])\s*已杀死\s*$|\b\d+ 已杀死\s+\S"
        r"|\btasks? [\d,-]+: Out Of Memory\b",
        (
            *_EXIT_ANCHORS,
            "SIGKILL",
            "Killed process",
            "Kill process",
            "xited with code 137",
            "xit code 137",
            "xit status 137",
            "OOMKilled",
            "Killed",
            "invoked oom-killer",
            "Detected",
            "zsh: killed",
            "已杀死",
            "Out Of Memory",
        ),
    ),
    # --- host memory: an allocation refused (no RAM left, or an address-space limit) ---
    _sig(
        "host_oom",
        "error",
        "The host ran out of memory: an allocation failed",
        r"DefaultCPUAllocator: (?:can't allocate memory|not enough memory)"
        r"|^\s*(?:\[rank\d+\]:\s*)?MemoryError\b|\[Errno 12\] Cannot allocate memory",
        ("DefaultCPUAllocator", "MemoryError", "Errno 12"),
    ),
    # --- NCCL (symptom: look for a root cause first) ---
    _sig(
        "nccl",
        "error",
        N_("An NCCL collective timed out"),
        r"Watchdog caught collective operation timeout|collective operation timeout"
        r"|NCCL communicator was aborted|NCCL timeout",
        ("collective operation timeout", "NCCL communicator", "NCCL timeout"),
    ),
    _sig(
        "nccl",
        "error",
        N_("NCCL failed"),
        r"NCCL error\b|nccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage|InvalidArgument)Error"
        r"|DistBackendError"
        # the NCCLCHECK macro of nccl-tests and of programs built on it: file:line 'reason'
        r"|NCCL failure \S+:\d+ '[^']+'",
        (
            "NCCL error",
            "ncclSystemError",
            "ncclInternalError",
            "ncclUnhandledCudaError",
            "ncclRemoteError",
            "ncclInvalidUsage",
            "ncclInvalidArgument",
            "DistBackendError",
            "NCCL failure",
        ),
    ),
    *NCCL_TRANSPORT,  # a broken socket/IB connection is an error, not a warning
    _sig("nccl", "warning", N_("NCCL warning"), r"NCCL WARN\b", ("NCCL WARN",)),
    # last: ssh's, the c10d store's and NCCL's own socket errors above keep their categories
    *NET_UNREACHABLE,
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
        ('File "',),
    ),
    # HF Trainer prints its final metrics after the last step, before saving the model.
    Marker(
        "train_done",
        re.compile(r"\{['\"]train_runtime['\"]\s*:"),
        ("{'train_runtime'", '{"train_runtime"'),
    ),
    # pip building a package from source.
    Marker(
        "pip_build",
        re.compile(
            r"Getting requirements to build wheel|Preparing metadata \(|Building wheel for"
            r"|Running setup\.py|Collecting flash"
            # setuptools' PEP 517 hook frames: a wheel being built (pip's own lines cut away)
            r"|build_meta\.py\"?, line \d+, in (?:build_wheel|_build_with_temp_dir)"
        ),
        (
            "requirements to build",
            "Preparing metadata",
            "Building wheel",
            "Running setup",
            "Collecting flash",
            "build_meta",
        ),
    ),
    *TRAIN_MARKERS,
    *METHOD_MARKERS,
    *CLUSTER_MARKERS,
    *HW_MARKERS,
    *CONFIG_MARKERS,
)
