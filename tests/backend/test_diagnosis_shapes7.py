"""Shapes taught after logcorpus7's first measurement, on lines written here from each
component's own message format (not the corpora's lines): Paddle's DataLoader SIGBUS handler,
slurmstepd's cancel notice, the NVIDIA driver's three-line "fallen off the bus", the raise in
transformers' HfArgumentParser, FastChat's one-turn mismatch, urllib3's failed lookup of a public
host, the Hub client's retry loop ending a log, torch's device check and a collator's KeyError
standing alone, and tqdm's 0-step bar, which is no progress."""

from __future__ import annotations

import pytest

from backend.diagnosis import diagnose_text

_HUB_101 = (
    "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
    "exceeded with url: /acme/tiny/resolve/main/vocab.json (Caused by NewConnectionError("
    "'<urllib3.connection.HTTPSConnection object at 0x7f00aa>: Failed to establish a new "
    "connection: [Errno 101] Network is unreachable'))\"), '(Request ID: 1-2-3)')' thrown while "
    "requesting HEAD https://huggingface.co/acme/tiny/resolve/main/vocab.json"
)
_HUB_GAI = _HUB_101.replace(
    "[Errno 101] Network is unreachable", "[Errno -3] Temporary failure in name resolution"
)

CASES = [
    (
        "shm",
        "ERROR: Unexpected BUS error encountered in DataLoader worker. This might be caused by "
        "insufficient shared memory (shm), please check whether use_shared_memory is set and "
        "storage space in /dev/shm is enough",
    ),
    (
        "slurm_error",
        "slurmstepd: error: *** JOB 918 ON node-c7 CANCELLED AT 2026-03-04T05:06:07 DUE TO "
        "PREEMPTION ***",
    ),
    ("slurm_error", "slurmstepd-gpu4: error: *** STEP 31.2 ON gpu4 CANCELLED AT 2026-03-04 ***"),
    (
        "gpu_hardware",
        "[ 77.1] NVRM: The NVIDIA GPU 0000:41:00.0\n"
        "        NVRM: (PCI ID: 10de:2330) installed in this system has\n"
        "        NVRM: fallen off the bus and is not responding to commands.",
    ),
    (
        "hf_args",
        '  File "/env/lib/python3.11/site-packages/transformers/hf_argparser.py", line 350, in '
        "parse_args_into_dataclasses\n"
        '    raise ValueError(f"Some specified arguments are not used by the HfArgumentParser: '
        '{remaining_args}")',
    ),
    ("tokenization_mismatch", "WARNING: tokenization mismatch: 41 vs. 43. #turn = 1. (ignored)"),
    ("tokenization_mismatch", "WARNING: tokenization mismatch: 9 vs. 12.\n #turn = 1. (ignored)"),
    (
        "network_unreachable",
        "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='pypi.org', port=443): Max "
        "retries exceeded with url: /simple/peft/ (Caused by NewConnectionError('<x>: Failed to "
        "establish a new connection: [Errno -3] Temporary failure in name resolution'))",
    ),
    (
        "network_unreachable",
        "urllib3.exceptions.NameResolutionError: <x>: Failed to resolve 'cdn-lfs.huggingface.co' "
        "([Errno -2] Name or service not known)",
    ),
    ("network_unreachable", _HUB_101 + "\nRetrying in 2s [Retry 2/5].\n"),
    ("network_unreachable", "WARNING:x:" + _HUB_GAI + "\nRetrying in 1s [Retry 1/5]."),
    (
        "unrecognised_failure",
        "RuntimeError: Expected all tensors to be on the same device, but got index is on cpu, "
        "different from other tensors on cuda:0 (when checking argument in method "
        "wrapper_CUDA__index_select)",
    ),
    (
        "unrecognised_failure",
        "collate failed:\nbatch = [f['pixel_values'] for f in features]\nKeyError: 'pixel_values'",
    ),
    (
        "unrecognised_failure",
        'Traceback (most recent call last):\n  File "fit.py", line 3, in <module>\n    main()\n'
        "ValueError: no rows\nsteps:   0%|          | 0/150 [00:01<?, ?it/s]",
    ),
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
    # the Hub's retry warning alone, or with the run going on after it (its cache)
    _HUB_101,
    _HUB_GAI,
    _HUB_101
    + "\nRetrying in 1s [Retry 1/5].\nLoading checkpoint shards: 100%|██| 2/2 [00:03<00:00]",
    # a mismatch in a conversation of several turns: one odd sample until it repeats
    "WARNING: tokenization mismatch: 310 vs. 314. #turn = 4. (ignored)",
    # "fallen off the bus" in someone's words, not the driver's
    "is this GPU fallen off the bus and is not responding?",
    # a KeyError whose key the line above does not subscript
    "loading the split\nKeyError: 'validation'",
    # torch's device check, then training went on (a handled retry on another device)
    "RuntimeError: Expected all tensors to be on the same device, but found at least two "
    "devices, cuda:0 and cpu!\n{'loss': 1.92, 'learning_rate': 2e-05, 'epoch': 0.1}",
    # an exception the run outlived: the bar after it moved
    'Traceback (most recent call last):\n  File "fit.py", line 3, in <module>\n    main()\n'
    "ValueError: no rows\nsteps:   3%|▎         | 5/150 [00:09<04:30, 1.9s/it]",
    # c10d's reverse lookup of its own peer: harmless, printed by many healthy runs
    "[W1202 socket.cpp:204] [c10d] The hostname of the client socket cannot be retrieved. err=-3",
]


@pytest.mark.parametrize("log", LOOK_ALIKES)
def test_look_alikes_are_not_errors(log: str) -> None:
    top = diagnose_text(log + "\n").top
    assert top is None or top.severity != "error", top


def test_a_cluster_host_that_does_not_resolve_stays_hostname_resolution() -> None:
    log = (
        "requests.exceptions.ConnectionError: HTTPConnectionPool(host='gpu-node-3', port=8000): "
        "Max retries exceeded (Caused by NewConnectionError('<x>: Failed to establish a new "
        "connection: [Errno -2] Name or service not known'))\n"
    )
    top = diagnose_text(log).top
    assert top is not None and (top.category, top.severity) == ("hostname_resolution", "error")
    public = diagnose_text(log.replace("gpu-node-3", "huggingface.co")).top
    assert public is not None and public.category == "network_unreachable"
    assert "hostname_resolution" in public.explanation  # the explanation says why not it


def test_a_cancel_after_another_failure_is_that_failure() -> None:
    cancel = "slurmstepd: error: *** STEP 55.0 ON n3 CANCELLED AT 2026-05-06T07:08:09 ***\n"
    oom = "slurmstepd: error: Detected 1 oom_kill event in StepId=55.0. Some of the step tasks have been OOM Killed.\n"
    findings = diagnose_text(oom + cancel).findings
    assert [(f.category, f.severity) for f in findings][:2] == [
        ("host_oom", "error"),
        ("slurm_error", "warning"),
    ]
    alone = diagnose_text(cancel).top
    assert alone is not None and (alone.category, alone.severity) == ("slurm_error", "error")
    assert "sacct" in alone.explanation
    # the time limit cancels the job's steps too: the limit is the cause
    limit = "slurmstepd: error: *** JOB 55 ON n3 CANCELLED AT 2026-05-06T07:08:09 DUE TO TIME LIMIT ***\n"
    top = diagnose_text(cancel + limit).top
    assert top is not None and top.category == "slurm_time_limit"


def test_a_one_turn_mismatch_says_why_it_is_an_error() -> None:
    top = diagnose_text("WARNING: tokenization mismatch: 41 vs. 43. #turn = 1. (ignored)\n").top
    assert top is not None and "one-turn" in top.explanation
