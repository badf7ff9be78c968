"""Never silent: a log that ends on a fatal error no category knows gets an error-level
``unrecognised_failure`` finding that quotes the decisive line(s).

Every log here is written for the test in the shape each component prints (Python's traceback,
libstdc++'s terminate handler, torch's CUDA check, nvcc/gcc, torchrun's failure summary); paths,
names and messages are made up, none is pasted from a thread.
"""

from __future__ import annotations

import io
from dataclasses import asdict
from pathlib import Path

import pytest

from backend.diagnosis import Finding, diagnose_file, diagnose_stream, diagnose_text
from backend.diagnosis import parallel as par
from backend.diagnosis.unrecognised import UNRECOGNISED
from backend.rundir import LOG, RunStatus, create_run_dir, write_status
from backend.runs.diagnose_run import diagnose_run
from backend.runs.fallback import final_record
from backend.runs.resume import begin_attempt, end_attempt
from backend.runs.summary import summarize_run

PROGRESS = (
    "[trainwiz-entry] transformers 4.46.0, torch 2.5.1, attention sdpa\n"
    "  0%|          | 0/120 [00:00<?, ?it/s]\n"
    "{'loss': 2.114, 'grad_norm': 1.3, 'learning_rate': 2e-05, 'epoch': 0.01}\n"
    "  1%|          | 1/120 [00:02<04:10,  2.1s/it]\n"
)
KEY_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "/home/ana/proj/train.py", line 88, in <module>\n'
    "    trainer.train()\n"
    '  File "/opt/conda/lib/python3.11/site-packages/transformers/trainer.py", line 2123, in train\n'
    "    return inner_training_loop(\n"
    '  File "/home/ana/proj/data/rows.py", line 31, in to_features\n'
    '    prompt = record["instruction"]\n'
    "             ~~~~~~^^^^^^^^^^^^^^^\n"
    "KeyError: 'instruction'\n"
)
TORCHRUN_FAILED = (
    "E1201 12:00:05.123000 4242 torch/distributed/elastic/multiprocessing/api.py:869] failed "
    "(exitcode: 1) local_rank: 0 (pid: 4243) of binary: /usr/bin/python3\n"
)


def unrecognised(text: str) -> Finding:
    """The top finding, which must be the unrecognised failure at error level."""
    top = diagnose_text(text).top
    assert top is not None, text
    assert (top.category, top.severity) == (UNRECOGNISED, "error"), (top.category, top.text)
    return top


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_key_error_in_the_users_dataset_code_is_quoted_with_its_frame() -> None:
    log = PROGRESS + KEY_ERROR + TORCHRUN_FAILED
    top = unrecognised(log)
    assert "KeyError: 'instruction'" in top.text
    assert 'File "/home/ana/proj/data/rows.py", line 31, in to_features' in top.text
    assert top.line == line_of(log, "KeyError")
    assert line_of(log, "rows.py") in top.lines
    assert "KeyError: 'instruction'" in top.title  # what the run's "likely cause" line shows
    assert "to_features" in top.explanation and "rows.py" in top.explanation
    assert "no category" in top.explanation
    assert any("trainwiz diagnose --json" in f.title + f.reason for f in top.fixes)
    assert all(not fix.changes for fix in top.fixes)  # generic steps, no preset edit
    assert top.context[0] == "Traceback (most recent call last):"  # --json: the whole traceback
    assert top.context[-1] == "KeyError: 'instruction'"


def test_an_exception_from_a_librarys_frame_says_so() -> None:
    log = PROGRESS + (
        "Traceback (most recent call last):\n"
        '  File "/srv/job/run.py", line 12, in <module>\n'
        "    out = model(**batch)\n"
        '  File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/linear.py", line 125, '
        "in forward\n"
        "    return F.linear(input, self.weight, self.bias)\n"
        "RuntimeError: CUDA error: unspecified launch failure\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.\n"
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
        "Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:43 "
        "(most recent call first):\n"
        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3a in "
        "/opt/conda/lib/python3.11/site-packages/torch/lib/libc10.so)\n"
    )
    top = unrecognised(log)
    # (an illegal memory access is a category of its own: CUDA's catch-all launch failure is not)
    assert "RuntimeError: CUDA error: unspecified launch failure" in top.text
    assert 'linear.py", line 125, in forward' in top.text
    assert top.line == line_of(log, "RuntimeError")
    assert "library" in top.explanation


def test_ranks_prefixes_are_read_and_the_failing_ranks_exception_is_quoted() -> None:
    """Two ranks' tracebacks interleaved; torchrun's summary names rank 1 as the first failure."""
    log = PROGRESS + (
        "[rank1]: Traceback (most recent call last):\n"
        "[rank0]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/train.py", line 40, in <module>\n'
        '[rank0]:   File "/work/train.py", line 41, in <module>\n'
        "[rank1]:     batch = collate(rows)\n"
        "[rank0]:     loss.backward()\n"
        '[rank1]:   File "/work/collate.py", line 12, in collate\n'
        '[rank1]:     ids[i] = row["ids"][j]\n'
        "[rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running "
        "collective: CollectiveFingerPrint(SequenceNumber=12)\n"
        "[rank1]: IndexError: index 8 is out of bounds for dimension 0 with size 8\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-12-01_12:00:05\n"
        "  host      : gpu-a\n"
        "  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : 1 (pid: 5151)\n"
        "  error_file: <N/A>\n"
    )
    top = unrecognised(log)
    assert "IndexError: index 8 is out of bounds" in top.text
    assert 'collate.py", line 12, in collate' in top.text
    assert "[rank1]" not in top.text  # the prefix is the rank's, not the message's


def test_the_launchers_own_traceback_yields_to_the_workers_exception() -> None:
    log = (
        PROGRESS
        + KEY_ERROR
        + (
            "Traceback (most recent call last):\n"
            '  File "/opt/conda/bin/accelerate", line 8, in <module>\n'
            "    sys.exit(main())\n"
            '  File "/opt/conda/lib/python3.11/subprocess.py", line 413, in check_call\n'
            "    raise CalledProcessError(retcode, cmd)\n"
            "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', 'train.py']' returned "
            "non-zero exit status 1.\n"
        )
    )
    assert "KeyError: 'instruction'" in unrecognised(log).text


def test_a_cpp_exception_ends_the_process_what_is_quoted() -> None:
    log = PROGRESS + (
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  shard index of /data/shards/train-00017.bin is truncated\n"
        "Aborted (core dumped)\n"
    )
    top = unrecognised(log)
    assert "what():  shard index of /data/shards/train-00017.bin is truncated" in top.text
    assert "std::runtime_error" in top.text
    assert "shard index" in top.title
    assert top.line == line_of(log, "what():")


def test_a_bare_cuda_error_string_is_quoted() -> None:
    log = PROGRESS + (
        "rope_kernel launch failed\n"
        "CUDA error: unspecified launch failure (719) at csrc/rope.cu:88\n"
    )
    top = unrecognised(log)
    assert top.text.startswith("CUDA error: unspecified launch failure")
    assert "CUDA_LAUNCH_BLOCKING=1" in top.explanation + " ".join(f.reason for f in top.fixes)


def test_the_first_compiler_error_of_a_build_is_quoted() -> None:
    log = (
        "building 'fused_rope' extension\n"
        "/usr/local/cuda/bin/nvcc -I/opt/conda/include -c csrc/rope/fused_rope.cu -o "
        "build/fused_rope.o\n"
        'csrc/rope/fused_rope.cu(57): error: identifier "__hfma2_relu" is undefined\n'
        'csrc/rope/fused_rope.cu(61): error: identifier "acc" is undefined\n'
        '2 errors detected in the compilation of "csrc/rope/fused_rope.cu".\n'
        "error: command '/usr/local/cuda/bin/nvcc' failed with exit code 1\n"
    )
    top = unrecognised(log)
    assert top.text == 'csrc/rope/fused_rope.cu(57): error: identifier "__hfma2_relu" is undefined'
    gcc = "src/bpe.cpp:412:18: error: 'string_view' is not a member of 'std'\n"
    assert unrecognised("g++ -c src/bpe.cpp\n" + gcc).text == gcc.strip()


def test_torchruns_exit_summary_names_the_rank_the_node_and_the_signal() -> None:
    log = PROGRESS + (
        "E1201 12:00:05.1 77 torch/distributed/elastic/multiprocessing/api.py:869] failed "
        "(exitcode: -11) local_rank: 3 (pid: 4242) of binary: /usr/bin/python3\n"
        "Traceback (most recent call last):\n"
        '  File "/usr/local/bin/torchrun", line 8, in <module>\n'
        "    sys.exit(main())\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "============================================================\n"
        "train.py FAILED\n"
        "------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n"
        "[0]:\n"
        "  time      : 2026-12-01_12:00:05\n"
        "  host      : gpu-b\n"
        "  rank      : 3 (local_rank: 3)\n"
        "  exitcode  : -11 (pid: 4242)\n"
        "  error_file: <N/A>\n"
        "  traceback : Signal 11 (SIGSEGV) received by PID 4242\n"
        "============================================================\n"
    )
    top = unrecognised(log)
    assert "exitcode  : -11 (pid: 4242)" in top.text
    assert "Signal 11 (SIGSEGV)" in top.text
    assert "rank 3" in top.title and "gpu-b" in top.title
    assert top.line == line_of(log, "exitcode  : -11")


def test_a_node_tagged_traceback_names_its_node() -> None:
    tagged = "".join(f"[node1 gpu-b] {line}\n" for line in KEY_ERROR.splitlines())
    top = unrecognised(PROGRESS + tagged)
    assert top.node == "node1 gpu-b" and "KeyError: 'instruction'" in top.text


@pytest.mark.parametrize(
    "log",
    [
        pytest.param(
            PROGRESS + "Traceback (most recent call last):\n"
            '  File "/opt/conda/lib/python3.11/site-packages/usagestats/report.py", line 40, in '
            "load\n"
            "    return json.loads(raw)\n"
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n"
            "warning: could not read the usage report; continuing without it\n"
            "{'loss': 1.804, 'grad_norm': 0.9, 'learning_rate': 1.9e-05, 'epoch': 0.5}\n"
            " 50%|█████     | 60/120 [02:00<02:00,  2.0s/it]\n"
            "{'train_runtime': 240.1, 'train_samples_per_second': 4.0, 'train_loss': 1.7, "
            "'epoch': 1.0}\n"
            "[trainwiz-entry] model saved to /runs/x/output\n",
            id="handled warning traceback, then training to the end",
        ),
        pytest.param(
            PROGRESS + KEY_ERROR + "retrying with the next shard\n" + PROGRESS,
            id="an exception followed by more training",
        ),
        pytest.param(
            PROGRESS
            + "[trainwiz-entry] model saved to /runs/x/output\n"
            + "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f1>\n"
            + "Traceback (most recent call last):\n"
            '  File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/dataloader.py", '
            "line 1479, in __del__\n"
            "    self._shutdown_workers()\n"
            "AttributeError: 'NoneType' object has no attribute 'python_exit_status'\n",
            id="an exception Python ignored at interpreter exit",
        ),
        pytest.param(
            PROGRESS + KEY_ERROR + "[trainwiz 2026-12-01 12:01:00] run finished: finished\n",
            id="the run finished after it",
        ),
        pytest.param(
            PROGRESS + "Traceback (most recent call last):\n"
            '  File "/srv/job/run.py", line 12, in <module>\n',
            id="a traceback cut off before its exception",
        ),
    ],
)
def test_a_handled_or_unfinished_traceback_gives_nothing(log: str) -> None:
    assert diagnose_text(log).findings == []


def test_a_known_error_is_never_outranked_and_nothing_is_added() -> None:
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.10 GiB of which 1.2 GiB is free.\n"
    )
    found = diagnose_text(PROGRESS + oom + KEY_ERROR)
    assert [f.category for f in found.findings] == ["cuda_oom"]


def test_a_known_warning_stays_and_the_fatal_exception_goes_on_top() -> None:
    warning = "{'loss': 1.2, 'grad_norm': nan, 'learning_rate': 2e-05}\n"
    found = diagnose_text(PROGRESS + warning + KEY_ERROR)
    assert [(f.category, f.severity) for f in found.findings] == [
        (UNRECOGNISED, "error"),
        ("loss_nan", "warning"),
    ]


def test_every_scan_mode_and_the_parallel_parts_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quote comes from the log's tail, read the same way whichever scan reads the rest."""
    log = tmp_path / "big.log"
    log.write_text(PROGRESS * 6000 + KEY_ERROR + TORCHRUN_FAILED, encoding="utf-8")
    data = log.read_bytes()
    modes = {
        mode: [asdict(f) for f in diagnose_stream(io.BytesIO(data), mode=mode).findings]
        for mode in ("shapes", "direct", "exhaustive")
    }
    assert modes["shapes"] == modes["direct"] == modes["exhaustive"]
    monkeypatch.setattr(par, "PARALLEL_MIN", 1 << 20)
    monkeypatch.setattr(par, "PART_MIN", 1 << 20)
    monkeypatch.setenv("TRAINWIZ_DIAGNOSE_JOBS", "2")
    assert par.jobs_for(len(data)) == 2
    split = [asdict(f) for f in diagnose_file(log).findings]
    assert split == modes["shapes"]
    assert split[0]["category"] == UNRECOGNISED
    assert split[0]["line"] == data.count(b"\n") - 1  # the KeyError, above torchrun's line


def test_a_failed_run_records_and_summarises_the_quoted_exception() -> None:
    """attempts.jsonl names it, the final record's message quotes it instead of a bare exit
    code, the summary's likely cause shows it, and `diagnose RUN` shows it on top (not the
    record's "no line the classifier recognises")."""
    run_dir = create_run_dir("unrecognised", "host")
    record = begin_attempt(run_dir, "launch")
    (run_dir / LOG).write_text(PROGRESS + KEY_ERROR + TORCHRUN_FAILED, encoding="utf-8")
    ended = end_attempt(run_dir, record["attempt"], 1, "exit code 1")
    assert ended["diagnosis_category"] == UNRECOGNISED
    message, cause = final_record(run_dir, "exit code 1", "exit_code")
    assert message == "KeyError: 'instruction' (exit code 1)" and cause == "exit_code"

    summary = summarize_run(run_dir, with_diagnosis=True)
    assert summary.top_finding is not None
    assert "KeyError: 'instruction'" in summary.top_finding.title

    write_status(
        run_dir,
        RunStatus(
            run_id=run_dir.name,
            preset="tiny-cpu",
            runner="host",
            state="failed",
            cause=cause,
            exit_code=1,
            message=message,
        ),
    )
    findings = diagnose_run(run_dir).diagnosis.findings
    assert [f.category for f in findings] == [UNRECOGNISED]


def test_a_record_with_a_cause_of_its_own_comes_first() -> None:
    """A cause the watcher knew (here a full disk found by statvfs) outranks an exception that
    no category knows; the exception is still listed, quoted."""
    run_dir = create_run_dir("unrecognised-disk", "host")
    (run_dir / LOG).write_text(PROGRESS + KEY_ERROR, encoding="utf-8")
    write_status(
        run_dir,
        RunStatus(
            run_id=run_dir.name,
            preset="tiny-cpu",
            runner="host",
            state="failed",
            cause="disk_full",
            exit_code=1,
            message="disk full: no space left under /runs (exit code 1)",
        ),
    )
    findings = diagnose_run(run_dir).diagnosis.findings
    assert [f.category for f in findings] == ["run_record", UNRECOGNISED]
