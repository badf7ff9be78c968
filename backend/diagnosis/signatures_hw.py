"""Signatures of failures below the training code: the GPU's hardware, a CUDA kernel's fault,
fp16 AMP's gradient scaler, the file system, and the network.

Each pattern quotes what the failing component prints, as its source spells it: the NVIDIA
kernel driver's ``NVRM: Xid (PCI:<bus>): <n>, …`` and ``GPU … has fallen off the bus`` lines,
NVSwitch's ``SXid``, NVML's ``GPU is lost``, the CUDA runtime's error strings
(``cudaGetErrorString``: ``an illegal memory access was encountered``, ``misaligned address``,
``uncorrectable ECC error encountered``, ``uncorrectable NVLink error detected during the
execution``, ``device-side assert triggered``) as PyTorch (``CUDA error: …``), NCCL (``Cuda
failure '…'``) and Triton (``Triton Error [CUDA]: …``) pass them on, ATen's kernel assertions
(``Assertion `srcIndex < srcSelectSize` failed``), ``torch.amp.GradScaler``'s ``Attempting to
unscale FP16 gradients.``, glibc's strerror for EIO/ESTALE/EROFS and ENETUNREACH/EHOSTUNREACH/
ETIMEDOUT as Python (``[Errno 101] …``), torch's ``write(): fd N failed with …``, Rust's ``(os
error 5)``, coreutils, gloo, curl and the Linux block layer print it, and the Hugging Face Hub
client's "cannot connect" errors. Numbers, addresses, paths and hosts are groups.

Anchors are chosen so that their scan keys start with characters that already head a group
of the prefilter (``scan.py``): a capital (``VRM: Xid``, ``Errno 101``, ``Input/output``) or a
character already in use, never a new frequent one.
"""

from __future__ import annotations

import re

from backend.diagnosis.sigbase import Marker, Signature
from backend.diagnosis.sigbase import sig as _sig
from backend.i18n import N_

# NVIDIA's Xid catalogue: the events that mean the GPU (its memory, its links, its firmware or
# its PCIe connection) failed and the run on it cannot go on. 13, 31, 43 and 45 are usually the
# program's own kernel faulting (or being killed), 63 and 92 a recorded or corrected memory
# event: those are warnings here, and the program's own error (if any) is the cause.
XID_FATAL = (48, 61, 62, 64, 74, 79, 94, 95, 119, 120)
_PCI = r"(?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
_XID = r"NVRM: Xid \(" + _PCI + r"\): (?P<xid>"
_XID_ANCHORS = ("NVRM: Xid",)
_FATAL_XIDS = "|".join(str(n) for n in XID_FATAL)

# The CUDA runtime's strings for a kernel that faulted (cudaErrorIllegalAddress 700,
# cudaErrorIllegalInstruction 715, cudaErrorMisalignedAddress 716), as every layer quotes them.
_ILLEGAL = (
    r"an illegal (?:memory access|instruction) was encountered"
    r"|(?:CUDA error|Cuda failure(?: \d+)?|\[CUDA\]):? '?misaligned address"
    r"|CUDA_ERROR_(?:ILLEGAL|MISALIGNED)_ADDRESS|cudaError(?:Illegal|Misaligned)Address"
)
_ILLEGAL_ANCHORS = (
    "illegal memory access was encountered",
    "illegal instruction was encountered",
    "misaligned address",
    "ILLEGAL_ADDRESS",
    "MISALIGNED_ADDRESS",
    "IllegalAddress",
    "MisalignedAddress",
)
# ATen's bounds checks inside CUDA kernels (Indexing.cu's index_select, IndexKernel.cu's
# advanced indexing, Loss.cu's nll_loss targets), printed once per failing thread.
_INDEX_ASSERT = (
    r"Assertion\s+`?(?P<assertion>srcIndex < srcSelect(?:Dim)?Size|[^`\n]{0,80}\"?index out of"
    r" bounds\"?|t >= 0 && t < n_classes)`?\s+failed"
)
_INDEX_ANCHORS = ("srcIndex < srcSelect", "index out of bounds", "t < n_classes")

GPU_HARDWARE: tuple[Signature, ...] = (
    _sig(
        "gpu_hardware",
        "error",
        N_("The GPU reported a hardware error (NVIDIA Xid)"),
        _XID + _FATAL_XIDS + r")\b",
        _XID_ANCHORS,
    ),
    _sig(
        "gpu_hardware",
        "error",
        N_("The GPU has fallen off the bus"),
        # nv.c prints it over three lines, each with its own "NVRM: " (the PCI address on the
        # first): "NVRM: The NVIDIA GPU <pci>" / "NVRM: (PCI ID: …) installed in this system
        # has" / "NVRM: fallen off the bus and is not responding to commands."
        r"NVRM: GPU .{0,80}?has fallen off the bus|NVRM: fallen off the bus and is not responding",
        ("fallen off the bus",),
    ),
    _sig(
        "gpu_hardware",
        "error",
        N_("The GPU is lost (NVML)"),
        r"GPU ?(?P<lost>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f:.]+)?:? GPU is lost|NVMLError_GPUIsLost"
        r"|NVML_ERROR_GPU_IS_LOST",
        ("GPU is lost", "GPUIsLost", "GPU_IS_LOST"),
    ),
    _sig(
        "gpu_hardware",
        "error",
        N_("The GPU's memory had an uncorrectable ECC error"),
        r"uncorrectable ECC error encountered|CUDA_ERROR_ECC_UNCORRECTABLE|cudaErrorECCUncorrectable",
        ("uncorrectable ECC error", "ECC_UNCORRECTABLE", "ECCUncorrectable"),
    ),
    _sig(
        "gpu_hardware",
        "error",
        N_("An NVLink between GPUs failed"),
        r"uncorrectable NVLink error detected|CUDA_ERROR_NVLINK_UNCORRECTABLE"
        r"|cudaErrorNvlinkUncorrectable|nvidia-nvswitch\d*: SXid \([^)]*\): (?P<sxid>\d+), Fatal",
        ("NVLink error detected", "NVLINK_UNCORRECTABLE", "NvlinkUncorrectable", "nvidia-nvswitch"),
    ),
    # The rest of the driver's events: a warning (13/31/43/45 usually follow the program's own
    # fault; 63/92 are memory events the GPU corrected or recorded).
    _sig(
        "gpu_hardware",
        "warning",
        N_("The NVIDIA driver logged an Xid event"),
        _XID + r"\d+)\b|nvidia-nvswitch\d*: SXid \([^)]*\): (?P<sxid2>\d+), Non-fatal",
        (*_XID_ANCHORS, "nvidia-nvswitch"),
    ),
    # CUDA's catch-all errors are the hardware's when the driver said so nearby (before or
    # after: a dmesg excerpt is often pasted below the traceback); alone they stay unrecognised.
    _sig(
        "gpu_hardware",
        "error",
        N_("A CUDA call failed after a GPU hardware error"),
        r"CUDA (?:driver )?error: (?:unknown error|unspecified launch failure)"
        r"|Cuda failure (?:\d+ )?'(?:unknown error|unspecified launch failure)'"
        r"|cudaError(?:Unknown|LaunchFailure)\b|CUDA_ERROR_(?:UNKNOWN|LAUNCH_FAILED)\b",
        (
            "CUDA error: unknown",
            "CUDA driver error: unknown",
            "unspecified launch failure",
            "Cuda failure",
            "cudaErrorUnknown",
            "cudaErrorLaunchFailure",
            "CUDA_ERROR_UNKNOWN",
            "CUDA_ERROR_LAUNCH_FAILED",
        ),
        near=("gpu_hw", 2000),
    ),
)

KERNEL_FAULTS: tuple[Signature, ...] = (
    _sig(
        "illegal_memory_access",
        "error",
        N_("An index is out of range in a CUDA kernel (token id >= vocabulary size?)"),
        _INDEX_ASSERT,
        _INDEX_ANCHORS,
    ),
    _sig(
        "illegal_memory_access",
        "error",
        N_("A CUDA kernel accessed memory illegally"),
        _ILLEGAL,
        _ILLEGAL_ANCHORS,
    ),
    _sig(
        "illegal_memory_access",
        "error",
        N_("A CUDA kernel's assertion failed (device-side assert)"),
        r"device-side assert triggered|cudaErrorAssert\b|CUDA_ERROR_ASSERT\b",
        ("device-side assert triggered", "cudaErrorAssert", "CUDA_ERROR_ASSERT"),
    ),
    # cuBLAS/cuDNN report the kernel fault of their own call; next to an illegal access or a
    # failed assertion it is that fault (alone it may be a library or driver problem).
    _sig(
        "illegal_memory_access",
        "error",
        N_("A CUDA kernel accessed memory illegally"),
        r"CUBLAS_STATUS_EXECUTION_FAILED|CUDNN_STATUS_EXECUTION_FAILED",
        ("CUBLAS_STATUS_EXE", "CUDNN_STATUS_EXE"),
        near=("kernel_fault", 200),
    ),
)

AMP: tuple[Signature, ...] = (
    # torch.amp.GradScaler._unscale_grads_: a trainable parameter's gradient is fp16.
    _sig(
        "fp16_unscale",
        "error",
        N_("fp16 AMP found fp16 trainable weights (Attempting to unscale FP16 gradients)"),
        r"Attempting to unscale FP16\b",
        ("Attempting to unscale FP16",),
    ),
)

_IO_STRERROR = r"(?P<strerror>Input/output error|Stale (?:NFS )?file handle|Read-only file system)"
_IO_ANCHORS = ("Input/output error", "Stale file handle", "Stale NFS file handle", "Read-only file")
# Python's OSError (one path, or "src -> dst"), torch's C++ writer, Rust's io::Error, coreutils'
# "'PATH': strerror" (not /proc or /sys, which are read-only by design).
_IO_ERROR = (
    r"\[Errno (?:5|116|30)\] " + _IO_STRERROR + r"(?:: '(?P<path>[^']+)')?"
    r"|(?:write|read)\(\): fd \d+ failed with " + _IO_STRERROR.replace("?P<strerror>", "?:")
    + r"|" + _IO_STRERROR.replace("?P<strerror>", "?:") + r" \(os error (?:5|116|30)\)"
    r"|'(?!/(?:proc|sys)/)(?P<path2>/[^']+)': " + _IO_STRERROR.replace("?P<strerror>", "?:")
)  # fmt: skip
IO: tuple[Signature, ...] = (
    # Said while the run goes on: a cache folder (matplotlib, triton, the Hub) not writable.
    _sig(
        "io_error",
        "warning",
        N_("A cache folder is on a read-only or failing file system"),
        r"(?i:warn|ignor|mkdir -p failed for path|falling back)[^\n]{0,400}?(?:" + _IO_ERROR + ")",
        _IO_ANCHORS,
    ),
    _sig(
        "io_error",
        "error",
        N_("A file system read or write failed (I/O error, stale handle, read-only)"),
        _IO_ERROR,
        _IO_ANCHORS,
    ),
    # The kernel's word for it: the block layer's failed request, ext4 giving up on a device.
    _sig(
        "io_error",
        "error",
        N_("The disk reported an I/O error"),
        r"\bI/O error, dev (?P<dev>[\w-]+), sector \d+|EXT4-fs error \(device (?P<dev2>[\w-]+)\)"
        r"|Remounting filesystem read-only",
        ("I/O error, dev", "T4-fs error (device", "Remounting filesystem read-only"),
    ),
)


def _unnamed(pattern: str) -> str:
    """The pattern without group names, to use it twice in one regex."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


_UNREACH = r"(?:Network is unreachable|No route to host|Connection timed out)"
_NET_ERROR = (
    r"\[Errno (?:101|110|113)\] " + _UNREACH
    # gloo's pair.cc: "connect [10.0.0.2]:43215: No route to host"
    + r"|\bconnect \[(?P<gaddr>[^\]\s]+)\]:(?P<gport>\d+): " + _UNREACH
    # curl: "Failed to connect to H port P after N ms: …"; wget: "… failed: No route to host."
    + r"|Failed to connect to (?P<chost>\S+) port (?P<cport>\d+)[^:\n]{0,40}: " + _UNREACH
    + r"|\.\.\. failed: " + _UNREACH
    # urllib3's ConnectTimeoutError
    + r"|Connection to (?P<thost>[\w.-]+) timed out\. \(connect timeout="
)  # fmt: skip
_NET_ANCHORS = (
    "Network is unreachable",
    "No route to host",
    "Connection timed out",
    "Connection to ",
)
# After every other signature (signatures.py): ssh's, the c10d store's and NCCL's own socket
# errors name their component and stay node_unreachable, rendezvous_timeout and nccl.
NET_UNREACHABLE: tuple[Signature, ...] = (
    # Retried while the run goes on (pip, the Hub's backoff, which may fall back to the cache).
    _sig(
        "network_unreachable",
        "warning",
        N_("A host did not answer (retrying)"),
        r"(?i:warn|retrying)[^\n]{0,800}?(?:" + _NET_ERROR + ")"
        # huggingface_hub's backoff: "'(MaxRetryError(… [Errno 101] …))' thrown while requesting"
        r"|(?:" + _unnamed(_NET_ERROR) + r")[^\n]{0,400}?thrown while requesting",
        _NET_ANCHORS,
    ),
    _sig(
        "network_unreachable",
        "error",
        N_("A host could not be reached over the network"),
        _NET_ERROR,
        _NET_ANCHORS,
    ),
    # The Hub client found neither the network nor the files in its cache.
    _sig(
        "network_unreachable",
        "error",
        N_("The Hugging Face Hub could not be reached"),
        r"We couldn't connect to '(?P<hub>[^'\s]+)'"
        r"|Connection error, and we cannot find the requested files in the"
        r"|we cannot find the requested files in the local cache\. Please check your connection",
        ("couldn't connect to '", "Connection error, and we", "Please check your connection"),
    ),
)

HW_MARKERS: tuple[Marker, ...] = (
    # The driver or CUDA saying the GPU itself failed: a catch-all CUDA error near it is that.
    Marker(
        "gpu_hw",
        re.compile(
            _XID
            + _FATAL_XIDS
            + r")\b|(?:has|NVRM:) fallen off the bus|GPU is lost|uncorrectable (?:ECC|NVLink)"
            r" error|nvidia-nvswitch\d*: SXid \([^)]*\): \d+, Fatal"
        ),
        (
            "NVRM: Xid",
            "fallen off the bus",
            "GPU is lost",
            "uncorrectable ECC error",
            "NVLink error detected",
            "nvidia-nvswitch",
        ),
    ),
    # A kernel's fault, printed by CUDA or an ATen assertion: a cuBLAS failure next to it is it.
    Marker(
        "kernel_fault",
        re.compile(_ILLEGAL + r"|device-side assert triggered|" + _INDEX_ASSERT),
        (*_ILLEGAL_ANCHORS, "device-side assert triggered", *_INDEX_ANCHORS),
    ),
)

# Xid numbers and hosts the explanation and the fixes name (from every matched line).
XID_NUMBER = re.compile(r"NVRM: Xid \([^)]*\): (\d+)")
_TARGETS = (
    re.compile(r"host='(?P<host>[^']+)', port=(?P<port>\d+)"),
    re.compile(r"connect \[(?P<host>[^\]\s]+)\]:(?P<port>\d+):"),
    re.compile(r"Failed to connect to (?P<host>\S+) port (?P<port>\d+)"),
    re.compile(r"Connecting to (?P<host>[\w.-]+)[^|\n]*(?:\|[^|\n]*\|)?:(?P<port>\d+)\.\.\."),
    re.compile(r"Connection to (?P<host>[\w.-]+) timed out"),
    re.compile(r"couldn't connect to 'https?://(?P<host>[^/'\s:]+)(?::(?P<port>\d+))?"),
    re.compile(r"https?://(?P<host>[\w.-]+)(?::(?P<port>\d+))?/"),
)


def xid_numbers(text: str) -> list[int]:
    """The distinct Xid numbers in the matched lines, in the order they were seen."""
    seen: list[int] = []
    for number in XID_NUMBER.findall(text):
        if int(number) not in seen:
            seen.append(int(number))
    return seen


def network_target(text: str) -> tuple[str, str | None] | None:
    """(host, port or None) the failed connection went to, as the message names it."""
    for pattern in _TARGETS:
        found = pattern.search(text)
        if found:
            return found.group("host"), found.groupdict().get("port")
    return None


# (consequence, cause), as signatures_cluster.YIELDS_TO: when a log shows both at error level,
# the cause is listed first. A GPU that failed makes the next CUDA call fail with whatever
# error comes (often an illegal memory access); a host the network does not reach is named more
# precisely by its name not resolving, by ssh, or by the c10d store; an I/O error beside a
# full disk is the full disk.
HW_YIELDS_TO: tuple[tuple[str, str], ...] = (
    ("illegal_memory_access", "gpu_hardware"),
    ("network_unreachable", "hostname_resolution"),
    ("network_unreachable", "node_unreachable"),
    ("network_unreachable", "rendezvous_timeout"),
    ("io_error", "disk_full"),
)
