"""Five message shapes the held-out fourth corpus showed missing, each tested on lines written
here in the component's own format (paths, numbers and module names are made up), never on a
pasted thread's line: the corpus itself (test_diagnosis_corpus4.py) says what they fixed there.
"""

from __future__ import annotations

import shlex

from backend.diagnosis import diagnose_text


def top(text: str) -> tuple[str, str]:
    found = diagnose_text(text).top
    assert found is not None, text
    return found.category, found.severity


def test_transformers_import_wrapper_yields_to_the_error_printed_under_it() -> None:
    log = (
        "RuntimeError: Failed to import transformers.models.qwen2.modeling_qwen2 because of the "
        "following error (look up to see its traceback):\n"
        "/opt/env/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so:"
        " undefined symbol: _ZN3c104cuda9SetDeviceEa\n"
    )
    diagnosis = diagnose_text(log)
    assert top(log) == ("flash_attn_runtime", "error")
    wrapper = [f for f in diagnosis.findings if f.category == "version_mismatch"]
    assert [f.severity for f in wrapper] == ["warning"]  # still shown, never the cause


def test_the_import_wrapper_alone_is_still_an_error() -> None:
    log = (
        "RuntimeError: Failed to import transformers.trainer because of the following error (look"
        " up to see its traceback):\n"
    )
    assert top(log) == ("version_mismatch", "error")


def test_cannot_import_name_without_its_module_is_a_version_mismatch() -> None:
    assert top("Got `ImportError: cannot import name 'FancyNewConfig'` on import\n") == (
        "version_mismatch",
        "error",
    )


def test_the_ncclcheck_macro_line_is_an_nccl_failure() -> None:
    log = (
        "node-a:771:790 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct\n"
        "NCCL failure all_gather.cu:58 'remote process exited or there was a network error'\n"
    )
    assert top(log) == ("nccl", "error")


def test_a_c10d_socket_wait_that_timed_out_is_the_rendezvous() -> None:
    log = (
        "[W1203 09:12:44.118 socket.cpp:460] [c10d] waitForInput: socket SocketImpl(fd=7, "
        "addr=[gpu-b]:51220, remote=[gpu-a]:29500) timed out after 600000ms\n"
    )
    assert top(log) == ("rendezvous_timeout", "error")


def test_a_folder_another_user_owns_is_named_and_the_fix_quotes_it() -> None:
    folder = "/data/hf cache/$(touch pwned)"
    log = f"PermissionError: [Errno 13] Permission denied: '{folder}'\n"
    finding = diagnose_text(log).top
    assert finding is not None and (finding.category, finding.severity) == (
        "container_permission",
        "error",
    )
    assert folder in finding.explanation and "docker run option" not in finding.explanation
    (fix,) = finding.fixes
    assert shlex.quote(folder) in fix.reason


def test_a_cache_write_the_run_goes_on_after_is_a_warning() -> None:
    log = (
        "Ignored error while writing commit hash to /srv/cache/hub/models--a--b/refs/main: "
        "[Errno 13] Permission denied: '/srv/cache/hub'.\n"
    )
    assert top(log) == ("container_permission", "warning")


def test_flash_attns_cuda_check_while_pip_builds_it_is_the_build() -> None:
    log = (
        "Collecting flash-attn\n"
        "  Preparing metadata (setup.py) ... error\n"
        "      RuntimeError: FlashAttention is only supported on CUDA 11.7 and above.  Note: make"
        " sure nvcc has a supported version by running nvcc -V.\n"
    )
    assert top(log) == ("flash_attn_build", "error")
    # the same words from an installed flash-attn at run time stay a runtime failure
    assert top("RuntimeError: FlashAttention is only supported on CUDA 11.7 and above\n") == (
        "flash_attn_runtime",
        "error",
    )


def test_a_failed_ninja_under_setuptools_wheel_hooks_is_an_extension_build() -> None:
    log = (
        "      subprocess.CalledProcessError: Command '['ninja', '-v', '-j', '8']' returned "
        "non-zero exit status 1.\n"
        "      Traceback (most recent call last):\n"
        '        File "/env/lib/python3.12/site-packages/setuptools/build_meta.py", line 410, in '
        "build_wheel\n"
    )
    assert top(log) == ("flash_attn_build", "error")
    # without a build around it, a failed ninja names nothing
    assert diagnose_text(log.splitlines()[0] + "\n").top is None


def test_a_node_unreachable_because_its_name_does_not_resolve_is_a_naming_problem() -> None:
    log = (
        "RuntimeError: Using hostfile at /job/hosts but host=worker-3.cluster.local was not "
        "reachable via ssh.\n"
        "ssh: Could not resolve hostname worker-3.cluster.local: Name or service not known\n"
    )
    diagnosis = diagnose_text(log)
    assert [f.category for f in diagnosis.findings][:2] == [
        "hostname_resolution",
        "node_unreachable",
    ]
    # a node that is down (its name resolves) stays the cause
    assert top("ssh: connect to host 10.0.0.7 port 22: Connection timed out\n") == (
        "node_unreachable",
        "error",
    )
