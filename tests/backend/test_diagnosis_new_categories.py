"""The five categories below the training code: gpu_hardware, illegal_memory_access,
fp16_unscale, io_error and network_unreachable.

Every line here is written for this test from the message's shape as its component prints it
(the NVIDIA driver's ``NVRM: Xid (PCI:<bus>): <n>, …``, the CUDA runtime's error strings as
PyTorch, NCCL and Triton quote them, ATen's kernel assertions, ``GradScaler``'s ValueError,
glibc's strerror behind Python's ``[Errno N]``, torch's ``write(): fd N failed with …``, gloo,
curl, urllib3 and the Hub client); hosts, paths, ranks and numbers are made up. Each category
gets shapes with and without a rank prefix or a timestamp, healthy look-alikes that must stay
quiet, and the sibling rules (which finding comes first when two categories share a log).
"""

from __future__ import annotations

import io

import pytest

from backend.diagnosis import Fix, apply_fixes, classify_line, diagnose_text
from backend.diagnosis.classifier import diagnose_stream
from backend.preset.loader import load_preset
from backend.preset.schema import Preset

IMA = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
XID79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, GPU has fallen off the bus.\n"
HUB_101 = (
    "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443):"
    " Max retries exceeded with url: /api/models/org/m (Caused by NewConnectionError('<urllib3."
    "connection.HTTPSConnection object at 0x7f0c>: Failed to establish a new connection: "
    "[Errno 101] Network is unreachable'))"
)
HUB_CONNECT = (
    "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find "
    "it in the cached files and it looks like org/model is not the path to a directory."
)

POSITIVE = [
    # gpu_hardware: the driver's Xid lines (dmesg, journalctl, a health agent's copy)
    ("[Mon Dec  1 12:00:01 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=2231, name=python, GPU has "
     "fallen off the bus.", "gpu_hardware"),
    ("Dec  1 12:00:01 gpu-a kernel: [8812.337] NVRM: Xid (PCI:0000:b3:00): 48, pid=771, An "
     "uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
     "partition 6, subpartition 0.", "gpu_hardware"),
    ("NVRM: Xid (0000:07:00): 95, pid=5501, Uncontained: FBHUB. RST: Yes, D-RST: No",
     "gpu_hardware"),
    ("gpu-a kernel: NVRM: Xid (PCI:0000:18:00): 74, pid=90, NVLink: fatal error detected on "
     "link 3(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", "gpu_hardware"),
    ("[  812.5] NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.", "gpu_hardware"),
    ("NVRM: GPU at PCI:0000:2b:00: GPU-5e1f0c2a has fallen off the bus.", "gpu_hardware"),
    ("[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_hardware"),
    ("torch.AcceleratorError: CUDA error: uncorrectable NVLink error detected during the "
     "execution", "gpu_hardware"),
    ("gpu-b:311:402 [2] include/alloc.h:125 NCCL WARN Cuda failure 214 'uncorrectable ECC error "
     "encountered'", "gpu_hardware"),
    ("Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the "
     "system to recover this GPU", "gpu_hardware"),
    ("nvidia-nvswitch2: SXid (PCI:0000:86:00.0): 24007, Fatal, Link 41 sourcetrack timeout",
     "gpu_hardware"),
    # illegal_memory_access: CUDA's strings in torch, NCCL, Triton; ATen's bounds checks
    ("[rank1]: RuntimeError: CUDA error: an illegal memory access was encountered",
     "illegal_memory_access"),
    ("2026-12-01 12:00:01,113 ERROR RuntimeError: Triton Error [CUDA]: an illegal memory access "
     "was encountered", "illegal_memory_access"),
    ("node-a:55:90 [0] enqueue.cc:1556 NCCL WARN Cuda failure 700 'an illegal memory access was "
     "encountered'", "illegal_memory_access"),
    ("RuntimeError: CUDA error: misaligned address", "illegal_memory_access"),
    ("RuntimeError: Triton Error [CUDA]: misaligned address", "illegal_memory_access"),
    ("triton.runtime.errors: cuLaunchKernel failed: CUDA_ERROR_ILLEGAL_ADDRESS",
     "illegal_memory_access"),
    ("/opt/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1422: indexSelectLargeIndex: block: "
     "[310,0,0], thread: [96,0,0] Assertion `srcIndex < srcSelectSize` failed.",
     "illegal_memory_access"),
    ("../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectSmallIndex: block: [4,0,0], "
     "thread: [7,0,0] Assertion `srcIndex < srcSelectDimSize` failed.", "illegal_memory_access"),
    ("[rank2]: /src/aten/src/ATen/native/cuda/IndexKernel.cu:93: operator(): block: [12,0,0], "
     "thread: [3,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of "
     "bounds\"` failed.", "illegal_memory_access"),
    ("/src/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_kernel_2d: block:"
     " [0,0,0], thread: [9,0,0] Assertion `t >= 0 && t < n_classes` failed.",
     "illegal_memory_access"),
    ("[rank0]: RuntimeError: CUDA error: device-side assert triggered", "illegal_memory_access"),
    # fp16_unscale: torch.amp's GradScaler
    ("ValueError: Attempting to unscale FP16 gradients.", "fp16_unscale"),
    ("[rank3]:     raise ValueError(\"Attempting to unscale FP16 gradients.\")", "fp16_unscale"),
    # io_error: Python's OSError, torch's writer, Rust's io::Error, coreutils, the kernel
    ("OSError: [Errno 5] Input/output error: '/mnt/nfs/out/checkpoint-800/optimizer.pt'",
     "io_error"),
    ("[rank0]: OSError: [Errno 116] Stale file handle: '/lustre/proj/data/train.jsonl'",
     "io_error"),
    ("[2026-12-01 12:00:09,441] [ERROR] OSError: [Errno 30] Read-only file system: "
     "'/models/out/checkpoint-5'", "io_error"),
    ("RuntimeError: write(): fd 41 failed with Input/output error", "io_error"),
    ("Exception: Error while serializing: IoError(Os { code: 5, kind: Uncategorized, message: "
     "\"Input/output error\" }) Input/output error (os error 5)", "io_error"),
    ("cp: error writing '/scratch/run7/model-00001-of-00004.safetensors': Input/output error",
     "io_error"),
    ("[Mon Dec  1 12:00:09 2026] blk_update_request: I/O error, dev nvme1n1, sector 88123392 op "
     "0x1:(WRITE) flags 0x0", "io_error"),
    ("EXT4-fs error (device sdb1): ext4_find_entry:1455: inode #2: comm python: reading "
     "directory lblock 0", "io_error"),
    # network_unreachable: urllib3/requests, Python sockets, gloo, curl, wget, the Hub client
    (HUB_101, "network_unreachable"),
    ("[rank4]: OSError: [Errno 113] No route to host", "network_unreachable"),
    ("TimeoutError: [Errno 110] Connection timed out", "network_unreachable"),
    ("RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
     "[10.8.0.12]:41423: No route to host", "network_unreachable"),
    ("curl: (7) Failed to connect to files.example.org port 443 after 3 ms: Network is "
     "unreachable", "network_unreachable"),
    ("Connecting to pypi.org (pypi.org)|151.101.0.223|:443... failed: Connection timed out.",
     "network_unreachable"),
    ("urllib3.exceptions.ConnectTimeoutError: (<urllib3.connection.HTTPSConnection object at "
     "0x7f>, 'Connection to huggingface.co timed out. (connect timeout=10)')",
     "network_unreachable"),
    (HUB_CONNECT, "network_unreachable"),
    ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate "
     "the file on the Hub and we cannot find the requested files in the local cache. Please "
     "check your connection and try again or make sure your Internet connection is on.",
     "network_unreachable"),
]  # fmt: skip


def _findings(text: str, mode: str = "shapes") -> list[tuple[str, str]]:
    diagnosis = diagnose_stream(io.BytesIO(text.encode()), mode=mode)  # type: ignore[arg-type]
    return [(f.category, f.severity) for f in diagnosis.findings]


@pytest.mark.parametrize(("line", "category"), POSITIVE)
def test_each_shape_is_its_category_at_error_level_in_every_scan_mode(
    line: str, category: str
) -> None:
    text = "{'loss': 1.2034, 'learning_rate': 2e-05, 'epoch': 0.41}\n" + line + "\n"
    found = _findings(text)
    assert found[0] == (category, "error"), found
    # the prefilter and the line shapes find what trying every signature on every line finds
    assert found == _findings(text, "direct") == _findings(text, "exhaustive")
    flag = classify_line(line)  # the live log pane, without context
    assert flag is not None and flag.category == category


# Messages spread over lines the way their components print them: torch's CUDA error with its
# hints below, libstdc++'s what() under the watchdog's terminate, the elastic agent's JSON
# error file with the message's newlines escaped, a rich-formatted box.
SPREAD = [
    ("[rank2]: Traceback (most recent call last):\n"
     "[rank2]:   File \"/srv/train.py\", line 88, in <module>\n"
     "[rank2]:     loss.backward()\n"
     "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
     "[rank2]: CUDA kernel errors might be asynchronously reported at some other API call, so the "
     "stacktrace below might be incorrect.\n"
     "[rank2]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
     "[rank2]: Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n",
     "illegal_memory_access", 4),
    ("terminate called after throwing an instance of 'c10::DistBackendError'\n"
     "  what():  [PG ID 0 PG GUID 0(default_pg) Rank 6] Process group watchdog thread terminated "
     "with exception: CUDA error: uncorrectable ECC error encountered\n"
     "Exception raised from c10_cuda_check_implementation at /pytorch/c10/cuda/CUDAException.cpp:43"
     " (most recent call first):\n",
     "gpu_hardware", 2),
    ('{"message": {"message": "RuntimeError: CUDA error: uncorrectable NVLink error detected '
     'during the execution\\nCUDA kernel errors might be asynchronously reported at some other '
     'API call\\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1.\\n", "extraInfo": '
     '{"timestamp": "1764590400"}}}\n',
     "gpu_hardware", 1),
    ("│ /srv/train.py:41 in main                                                  │\n"
     "╰───────────────────────────────────────────────────────────────────────────╯\n"
     "OSError: [Errno 116] Stale file handle: '/lustre/team/cache/datasets/train.arrow'\n",
     "io_error", 3),
]  # fmt: skip


@pytest.mark.parametrize(("text", "category", "line"), SPREAD)
def test_a_message_spread_over_lines_is_one_finding_at_its_line(
    text: str, category: str, line: int
) -> None:
    found = diagnose_text(text).findings
    assert (found[0].category, found[0].line, found[0].count) == (category, line, 1)
    assert {f.category for f in found[1:]} <= {"nccl"}  # the DistBackendError it reached NCCL as
    assert _findings(text) == _findings(text, "direct") == _findings(text, "exhaustive")


QUIET = [
    # NCCL INFO about an unreachable peer/transport it does not use is start-up chatter
    "gpu-a:12:34 [0] NCCL INFO NET/Socket : peer 10.0.0.9 unreachable over docker0, skipping",
    "gpu-a:12:34 [0] NCCL INFO NCCL_SOCKET_IFNAME set to ^lo,docker0 (no route to host docker0)",
    # an Xid or ECC mentioned in prose, a docstring, a help text, nvidia-smi's zero counters
    '    """Xid 79 means the GPU has fallen off the bus; see NVIDIA\'s Xid catalogue."""',
    "# drain the node on Xid 48 (uncorrectable ECC) or Xid 95",
    "            DRAM Uncorrectable                : 0",
    "        Retired Pages / Pending Page Blacklist : No",
    # PyTorch's boilerplate under any CUDA error, and its hint about device-side assertions
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    # apex's warning about a grad's type is not GradScaler's refusal
    "Attempting to unscale a grad with type torch.cuda.HalfTensor Unscaling non-fp32 grads may "
    "indicate an error.",
    # numpy's and Python's index errors are no CUDA kernel's assertion
    "IndexError: index 12 is out of bounds for axis 0 with size 12",
    # a mount described, not failing
    "overlay on / type overlay (rw,relatime)  tmpfs on /sys/fs/cgroup type tmpfs (ro,nosuid)",
]


@pytest.mark.parametrize("line", QUIET)
def test_healthy_look_alikes_give_nothing(line: str) -> None:
    assert _findings(line + "\n") == []
    assert classify_line(line) is None


WARNINGS = [
    # the Hub's backoff, then the cache it falls back to: the run goes on
    ("'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries exceeded"
     " (Caused by NewConnectionError('<urllib3.connection.HTTPSConnection object at 0x7f>: Failed"
     " to establish a new connection: [Errno 101] Network is unreachable'))\"), '(Request ID: "
     "x)')' thrown while requesting HEAD https://huggingface.co/org/m/resolve/main/config.json",
     "network_unreachable"),
    ("WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) after"
     " connection broken by 'NewConnectionError('<pip._vendor.urllib3.connection.HTTPSConnection "
     "object at 0x7f>: Failed to establish a new connection: [Errno 113] No route to host')': "
     "/simple/peft/", "network_unreachable"),
    # matplotlib and the Hub saying a cache folder cannot be written, and going on
    ("mkdir -p failed for path /home/u/.config/matplotlib: [Errno 30] Read-only file system: "
     "'/home/u/.config/matplotlib'", "io_error"),
    ("UserWarning: Ignored error while writing commit hash to /hf/refs/main: [Errno 30] Read-only "
     "file system: '/hf/refs/main'.", "io_error"),
    # the driver's events a program's own fault leaves (13, 31, 43, 45) and corrected memory
    ("NVRM: Xid (PCI:0000:3b:00): 31, pid=771, name=python, Ch 00000008, intr 00000000. MMU Fault:"
     " ENGINE GRAPHICS GPCCLIENT_T1_3 faulted @ 0x7f_1c000000.", "gpu_hardware"),
    ("NVRM: Xid (PCI:0000:3b:00): 13, pid=771, Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1)",
     "gpu_hardware"),
    ("NVRM: Xid (PCI:0000:3b:00): 92, pid=1, High single-bit ECC error rate", "gpu_hardware"),
]  # fmt: skip


@pytest.mark.parametrize(("line", "category"), WARNINGS)
def test_what_a_run_survives_is_a_warning(line: str, category: str) -> None:
    assert _findings(line + "\n") == [(category, "warning")]


# --- the sibling rules: which category a shared mechanism belongs to, and which comes first ---


def test_an_xid_outranks_the_cuda_error_it_causes_wherever_dmesg_was_pasted() -> None:
    before = XID79 + "[rank3]: " + IMA
    after = "[rank3]: " + IMA + "\n" * 3 + XID79
    for log in (before, after):
        assert [c for c, _ in _findings(log)] == ["gpu_hardware", "illegal_memory_access"]


def test_a_programs_own_fault_outranks_the_xid_it_leaves() -> None:
    log = (
        "NVRM: Xid (PCI:0000:3b:00): 31, pid=771, name=python, MMU Fault: ENGINE GRAPHICS\n"
        "NVRM: Xid (PCI:0000:3b:00): 43, pid=771, Ch 00000010\n" + IMA
    )
    assert _findings(log) == [("illegal_memory_access", "error"), ("gpu_hardware", "warning")]


def test_an_illegal_access_outranks_the_watchdog_timeouts_on_other_ranks() -> None:
    log = (
        "[rank0]:[E1201 12:10:00.1 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for "
        "600047 milliseconds before timing out.\n"
        "[rank1]:[E1201 12:00:00.1 ProcessGroupNCCL.cpp:1515] [PG 0 Rank 1] Process group "
        "watchdog thread terminated with exception: CUDA error: an illegal memory access was "
        "encountered\n"
        "terminate called after throwing an instance of 'c10::DistBackendError'\n"
    )
    assert [c for c, _ in _findings(log)] == ["illegal_memory_access", "nccl"]


def test_cuda_catch_all_errors_are_the_hardwares_only_next_to_a_hardware_sign() -> None:
    unknown = "[rank2]: RuntimeError: CUDA error: unknown error\n"
    assert _findings(unknown)[0] == ("unrecognised_failure", "error")
    assert _findings(unknown + "\n" * 40 + XID79) == [("gpu_hardware", "error")]
    launch = "RuntimeError: CUDA error: unspecified launch failure\n"
    assert _findings(XID79 + launch) == [("gpu_hardware", "error")]
    # a program's fault (Xid 13) is no hardware sign: the launch failure stays unrecognised
    xid13 = "NVRM: Xid (PCI:0000:3b:00): 13, pid=7, Graphics Exception\n"
    assert _findings(xid13 + launch)[0] == ("unrecognised_failure", "error")


def test_cublas_failing_after_an_index_assertion_is_that_assertion() -> None:
    cublas = (
        "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( "
        "handle, opa, opb, m, n, k, &falpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb)`\n"
    )
    assertion = (
        "Indexing.cu:1422: indexSelectLargeIndex: Assertion `srcIndex < srcSelectSize` failed.\n"
    )
    found = diagnose_text(assertion + cublas).findings
    assert [(f.category, f.count) for f in found] == [("illegal_memory_access", 2)]
    assert _findings(cublas)[0] == ("unrecognised_failure", "error")  # alone: not this category


def test_network_errors_of_ssh_the_c10d_store_nccl_and_the_resolver_keep_their_categories() -> None:
    assert _findings("ssh: connect to host gpu-b port 22: No route to host\n") == [
        ("node_unreachable", "error")
    ]
    store = (
        "[W1201 socket.cpp:697] [c10d] The client socket has failed to connect to [gpu-a]:29500 "
        "(errno: 101 - Network is unreachable).\n"
    )
    assert _findings(store) == [("rendezvous_timeout", "error")]
    nccl = "gpu-b:9:9 [1] misc/socket.cc:484 NCCL WARN Net : Connect to 10.0.0.2<43211> failed : No route to host\n"
    assert _findings(nccl) == [("nccl", "error")]
    resolver = (
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', "
        "port=443): Failed to resolve 'huggingface.co' ([Errno -3] Temporary failure in name "
        "resolution)\n"
    )
    # a public host's name not resolving is no network at all (test_diagnosis_shapes7); a
    # cluster host's is its name
    assert _findings(resolver) == [("network_unreachable", "error")]
    assert _findings(resolver.replace("huggingface.co", "gpu-a")) == [
        ("hostname_resolution", "error")
    ]


def test_a_cause_named_more_precisely_comes_before_an_unreachable_host() -> None:
    unreachable = "OSError: [Errno 113] No route to host\n"
    ssh = "ssh: connect to host gpu-b port 22: Connection timed out\n"
    resolve = "socket.gaierror: [Errno -2] Name or service not known\n"
    assert [c for c, _ in _findings(unreachable + ssh)] == [
        "node_unreachable",
        "network_unreachable",
    ]
    assert _findings(unreachable + resolve)[0][0] == "hostname_resolution"


def test_an_io_error_beside_a_full_disk_is_the_full_disk() -> None:
    log = (
        "RuntimeError: write(): fd 41 failed with Input/output error\n"
        "OSError: [Errno 28] No space left on device: '/data/out/checkpoint-9'\n"
    )
    assert [c for c, _ in _findings(log)] == ["disk_full", "io_error"]
    # a permission error is a folder's owner, not the storage
    assert _findings("PermissionError: [Errno 13] Permission denied: '/data/out'\n")[0][0] == (
        "container_permission"
    )


# --- explanations and fixes, with and without a preset ---


@pytest.fixture()
def vicuna() -> Preset:
    return load_preset("vicuna-7b-4xa100-40g")


def _with(preset: Preset, section: str, **values: object) -> Preset:
    data = preset.model_dump(mode="json", exclude_unset=True)
    data[section] = {**data.get(section, {}), **values}
    return Preset.model_validate(data)


def _changes(fix: Fix) -> dict[str, object]:
    return {c.path: c.value for c in fix.changes}


def _applied(preset: Preset, text: str, path: str) -> tuple[Preset, Fix]:
    top = diagnose_text(text, preset=preset).top
    assert top is not None
    fix = next(f for f in top.fixes if path in _changes(f))
    return apply_fixes(preset, fix), fix


def test_gpu_explanation_names_the_xid_numbers_from_nvidias_catalogue(vicuna: Preset) -> None:
    log = XID79 + "NVRM: Xid (PCI:0000:3b:00): 45, pid=2231, Ch 00000010\n"
    top = diagnose_text(log).top
    assert top is not None and top.category == "gpu_hardware"
    assert "Xid catalogue" in top.explanation
    assert "Xid 79: GPU has fallen off the bus" in top.explanation and "Xid 45" in top.explanation
    reasons = " ".join(f.title + " " + f.reason for f in top.fixes)
    for needed in ("nvidia-smi -q -d ECC,PAGE_RETIREMENT", "Retired Pages", "Remapped Rows",
                   "dmesg", "nvidia-smi -r", "drain"):  # fmt: skip
        assert needed in reasons, needed
    new, _fix = _applied(vicuna, log, "training.save_minutes")
    assert new.training.save_minutes == 30


def test_an_nvlink_failure_offers_nccl_off_nvlink(vicuna: Preset) -> None:
    log = "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution\n"
    new, _fix = _applied(vicuna, log, "launch.env")
    assert new.launch.env["NCCL_P2P_DISABLE"] == "1"


def test_an_index_assertion_points_at_the_vocabulary_first(vicuna: Preset) -> None:
    log = (
        "Indexing.cu:1422: indexSelectLargeIndex: block: [1,0,0], thread: [0,0,0] Assertion "
        "`srcIndex < srcSelectSize` failed.\n" + "RuntimeError: CUDA error: device-side assert "
        "triggered\n"
    )
    top = diagnose_text(log, preset=vicuna).top
    assert top is not None and top.category == "illegal_memory_access"
    assert "embedding" in top.explanation
    assert "resize_token_embeddings" in top.fixes[0].reason
    new, _fix = _applied(vicuna, log, "launch.env")
    assert new.launch.env["CUDA_LAUNCH_BLOCKING"] == "1"
    new, _fix = _applied(vicuna, log, "training.attn_implementation")
    assert new.training.attn_implementation == "sdpa"
    liger = _with(vicuna, "training", use_liger_kernel=True, torch_compile=True)
    new, _fix = _applied(liger, IMA, "training.use_liger_kernel")
    assert not new.training.use_liger_kernel and not new.training.torch_compile
    advice = diagnose_text(IMA).top
    assert advice is not None and any("compute-sanitizer" in f.reason for f in advice.fixes)
    assert not any("resize_token_embeddings" in f.reason for f in advice.fixes)  # no index seen


def test_fp16_unscale_moves_fp16_to_bf16_or_says_to_load_fp32(vicuna: Preset) -> None:
    log = "ValueError: Attempting to unscale FP16 gradients.\n"
    fp16 = _with(vicuna, "training", bf16=False, fp16=True)
    new, _fix = _applied(fp16, log, "training.bf16")
    assert new.training.bf16 and not new.training.fp16
    top = diagnose_text(log, preset=vicuna).top  # bf16 already: the code that runs asked fp16
    assert top is not None and all(not f.changes for f in top.fixes)
    assert "float32" in top.fixes[0].reason
    top = diagnose_text(log).top
    assert top is not None and [f.changes for f in top.fixes] == [[], []]


def test_io_error_names_the_path_and_moves_checkpoints_to_the_run(vicuna: Preset) -> None:
    log = "OSError: [Errno 5] Input/output error: '/data/output_vicuna/checkpoint-500/x.bin'\n"
    top = diagnose_text(log, preset=vicuna).top
    assert top is not None and top.category == "io_error"
    assert "/data/output_vicuna/checkpoint-500/x.bin" in top.explanation
    assert "/data/output_vicuna/checkpoint-500/x.bin" in top.fixes[0].title
    new, _fix = _applied(vicuna, log, "training.output_dir")
    assert new.training.output_dir == "@run/output"
    # a cache folder's error says nothing about output_dir
    cache = "OSError: [Errno 116] Stale file handle: '/nfs/hf/hub/models--x/blobs/abc'\n"
    top = diagnose_text(cache, preset=vicuna).top
    assert top is not None and not any(f.changes for f in top.fixes)
    assert any("smartctl" in f.reason for f in top.fixes)


def test_unreachable_hub_offers_a_mirror_and_names_the_host(vicuna: Preset) -> None:
    log = HUB_101 + "\n"
    top = diagnose_text(log, preset=vicuna).top
    assert top is not None and top.category == "network_unreachable"
    assert "huggingface.co:443" in top.explanation
    assert "nc -zv huggingface.co 443" in top.fixes[0].reason
    new, _fix = _applied(vicuna, log, "mirrors.profile")
    assert new.mirrors.profile == "auto"
    hub = diagnose_text(HUB_CONNECT + "\n").top
    assert hub is not None and any("HF_ENDPOINT" in f.reason for f in hub.fixes)


def test_unreachable_node_says_firewall_interface_and_proxy(vicuna: Preset) -> None:
    log = "RuntimeError: [gloo/transport/tcp/pair.cc:799] connect [10.8.0.12]:41423: No route to host\n"
    top = diagnose_text(log, preset=_with(vicuna, "launch", master_addr="10.8.0.1")).top
    assert top is not None and top.category == "network_unreachable"
    text = " ".join(f.title + " " + f.reason for f in top.fixes)
    for needed in ("nc -zv 10.8.0.12 41423", "10.8.0.1:20001", "NCCL_SOCKET_IFNAME", "NO_PROXY"):
        assert needed in text, needed
    assert not any("mirror" in f.title for f in top.fixes)  # not a download
