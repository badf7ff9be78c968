"""LogFollower on real files (growth, partial lines, tqdm, truncation, rotation) and LogModel."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from backend.monitor import LogBatch, LogFollower, LogModel, classify_batch, split_segments
from backend.monitor.logmodel import load_classifier

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
LOG_2G = H200 / "train-log-noofl_bs4_nogc_2g.txt"
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus"


class _Collector:
    def __init__(self) -> None:
        self.batches: list[LogBatch] = []
        self.cond = threading.Condition()

    def __call__(self, batch: LogBatch) -> None:
        with self.cond:
            self.batches.append(batch)
            self.cond.notify_all()

    def lines(self) -> list[str]:
        return [ln for b in self.batches for ln in b.lines]

    def wait_for(self, pred, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
        with self.cond:
            assert self.cond.wait_for(lambda: pred(self), timeout), self.lines()[-5:]


def _start(follower: LogFollower) -> tuple[threading.Thread, threading.Event]:
    cancel = threading.Event()
    t = threading.Thread(target=follower.run, args=(cancel,), daemon=True)
    t.start()
    return t, cancel


def test_follows_growth_partial_lines_and_carriage_returns(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    got = _Collector()
    follower = LogFollower(path, got, batch_interval=0.01, poll_interval=0.01)
    thread, cancel = _start(follower)
    try:
        path.write_text("first line\nsecond par")  # file appears after the follower started
        got.wait_for(lambda c: c.lines() == ["first line"])
        with open(path, "a") as fh:
            fh.write("t\r 10%|█  | 1/10 [00:00<00:07,  1.16it/s]\r   \r{'loss': 1.0}\n")
        got.wait_for(lambda c: len(c.lines()) == 4)
        assert got.lines()[1:] == [
            "second part",
            " 10%|█  | 1/10 [00:00<00:07,  1.16it/s]",
            "{'loss': 1.0}",
        ]
        assert got.batches[0].first_line_no == 1
        assert [n for b in got.batches for n in b.numbers] == [1, 2, 2, 2]  # physical lines
        assert got.batches[-1].eof
    finally:
        cancel.set()
        thread.join(5)
    assert not thread.is_alive()


def test_truncation_and_rotation_restart_from_the_top(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_text("a\nb\nc\n")
    got = _Collector()
    follower = LogFollower(path, got, batch_interval=0.01, poll_interval=0.01)
    thread, cancel = _start(follower)
    try:
        got.wait_for(lambda c: c.lines() == ["a", "b", "c"])
        path.write_text("x\n")  # truncated: smaller than what was read
        got.wait_for(lambda c: c.lines()[-1:] == ["x"])
        reset = [b for b in got.batches if b.reset]
        assert reset and reset[0].first_line_no == 1
        os.rename(path, tmp_path / "train.log.1")  # rotated: a new file under the old name
        path.write_text("fresh 1\nfresh 2\nmore than before\nand more\n")
        got.wait_for(lambda c: c.lines()[-1:] == ["and more"])
        assert follower.resets == 2
    finally:
        cancel.set()
        thread.join(5)


def test_memory_is_bounded_for_a_line_without_end(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"x" * 100_000)
    got = _Collector()
    LogFollower(path, got, max_line=1000, chunk_size=4096).run(threading.Event(), follow=False)
    assert all(len(ln) <= 1000 for ln in got.lines())
    assert sum(len(ln) for ln in got.lines()) == 100_000


def test_recorded_log_batches_into_a_model_with_progress_kept_aside() -> None:
    got = _Collector()
    LogFollower(LOG_2G, got).run(threading.Event(), follow=False)
    text = LOG_2G.read_bytes().decode()  # not read_text: it would turn tqdm's \r into \n
    assert got.lines() == list(split_segments(text))
    model = LogModel(max_lines=20)
    for b in got.batches:
        model.add(classify_batch(b, None))
    assert model.total == len(got.lines()) - sum(
        1 for s in got.lines() if "it/s]" in s and "%|" in s
    )
    assert len(model.lines) == 20 and model.dropped == model.total - 20
    assert model.progress is not None and "10/10" in model.progress
    assert model.lines[-1].text.startswith("[rank0]:[W1130")
    physical = text.split("\n")
    assert all(ln.text in physical[ln.no - 1] for ln in model.lines)  # numbered as an editor does
    assert model.lines[-1].no == len(physical) - 1 == 32


def test_log_model_counts_search_and_jump_with_the_project_classifier() -> None:
    classify = load_classifier()
    assert classify is not None, "backend.diagnosis.classify_line is the one classifier"
    oom = CORPUS / "cuda_oom" / "fastchat-1781-vicuna7b-a100-40g.log"
    got = _Collector()
    LogFollower(oom, got).run(threading.Event(), follow=False)
    model = LogModel()
    for b in got.batches:
        model.add(classify_batch(b, classify))
    assert model.counts.get("cuda_oom", 0) >= 1
    idx = model.next_flagged(-1)
    assert idx is not None and model.lines[idx].flag is not None
    hit = model.next_match("outofmemoryerror", -1)
    assert hit is not None and "OutOfMemoryError" in model.lines[hit].text


def test_progress_is_only_a_whole_tqdm_redraw() -> None:
    from backend.monitor import is_progress

    assert is_progress(" 40%|████      | 4/10 [00:01<00:02,  2.62it/s]")
    assert is_progress("  0%|          | 0/10 [00:00<?, ?it/s]  ")
    # A log line glued after a bar (no newline between) is text the user must see.
    assert not is_progress(" 40%|████  | 4/10 [00:01<00:02,  2.62it/s]RuntimeError: boom")
    assert not is_progress("{'loss': 7.6375, 'grad_norm': 14.3}")
