"""Held-out measurement on a fourth corpus (tests/fixtures/logcorpus4).

Every file is an excerpt of error output (or, under ``benign/``, of a run or warning that is no
failure) pasted in a public GitHub issue or pull-request thread; SOURCES.tsv gives the URL and
the shape of each excerpt. No thread is shared with logcorpus, logcorpus2 or logcorpus3, and the
signatures were never written from these logs: the corpus was collected first and measured
afterwards. That held-out measurement is 88 of 108 (81.5 %, docs/diagnosis.md). Eight message
shapes among its misses were then taught (transformers' import wrapper yields to the error under
it, ``cannot import name`` without its module, the NCCLCHECK macro's ``NCCL failure file:line``,
c10d's ``waitForInput ... timed out``, Python's ``[Errno 13] Permission denied: 'path'``, and in
a pip build flash-attn's CUDA check and torch's failed ninja; an ssh node that does not answer
yields to its name not resolving): since then this corpus is no longer held out for those, and
98 of 108 are right. Labels are the root cause the thread
establishes, which is sometimes not the loudest line (an elastic "exitcode: -9" summary, a
bitsandbytes warning above a host-RAM "Killed", an ssh refusal whose verbose output shows a name
that does not resolve). ``python -m tests.backend.test_diagnosis_corpus4`` prints the table.
"""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from pathlib import Path

from tests.backend.logcorpora import (
    assert_no_misses,
    assert_sources_list_every_file_once,
    no_error,
    sources,
    table_misses,
    thread_key,
    top_error_category,
    top_in,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "logcorpus4"
EARLIER = ("logcorpus", "logcorpus2", "logcorpus3")

# The misses left (held out: 88 of 108 right; after the eight shapes above: 98). Each maps to what
# diagnose says instead: the top error-level category, or "no error" when nothing reached error
# severity. A miss that starts passing is welcome; take it out of the dict then.
KNOWN_MISSES: dict[str, str] = {
    # bitsandbytes 0.41 BUG REPORT banner with only libcudart search warnings (the final
    # "CUDA Setup failed" line was not pasted).
    "bitsandbytes_cuda/bnb-966-bug-report-libcudart-not-found.log": "no error",
    # A cache folder the run cannot write, said while the run goes on (the Hub's "Ignored error
    # ... [Errno 13]" and "Could not cache non-existence", transformers' "write in your cache
    # folder"): a warning, not an error, since the download may still succeed.
    "container_permission/h2ogpt-729-docker-run-cache-not-writable.log": "warning only",
    "container_permission/harbor-262-root-cache-errno13-download.log": "warning only",
    "container_permission/nemotron-1386-hf-cache-no-exist-errno13.log": "warning only",
    # torch.save "write(): fd 29 failed with Input/output error"; the thread says the disk was full.
    # The log says EIO, not ENOSPC: an io_error (whose fixes include the free-space check).
    "disk_full/pytorch-10577-torch-save-write-io-error.log": "io_error",
    # A CPU-only bitsandbytes warning above the host-RAM "Killed" wins.
    "host_oom/textgen-2509-bnb-cpu-warning-then-killed.log": "bitsandbytes_cuda",
    # grad_norm nan (mmengine) and torch's "Non-finite norm encountered in clip_grad_norm_".
    "loss_nan/petr-175-nonfinite-clip-grad-norm-warning.log": "no error",
    "loss_nan/xtuner-187-mmengine-grad-norm-nan.log": "no error",
    # NCCL 2.4's "NCCL WARN Could not find real path of /sys/class/pci_bus" during DDP init.
    "nccl/pytorch-40273-topo-real-path-ddp.log": "no error",
    # User-retyped "value error: Target modules([...])not found" in Chinese prose.
    "peft_target_modules/longlora-54-chinese-value-error-paraphrase.log": "no error",
}
# Benign logs whose top finding is error-level: none on the first measurement (12 of 12 clean).
KNOWN_FALSE_ALARMS: set[str] = set()
HELD_OUT_RATE = 88 / 108  # right / failure logs on the first (held-out) measurement
MEASURED_RATE = 98 / 108  # since the eight shapes were taught


def _rows(corpus: Path = CORPUS) -> list[dict[str, str]]:
    return sources(corpus)


FAILURES = [(r["file"], r["label"]) for r in _rows() if r["label"] != "benign"]
BENIGN = [r["file"] for r in _rows() if r["label"] == "benign"]


def top_category(name: str) -> str | None:
    return top_error_category(CORPUS / name)


def test_sources_list_every_file_once_with_url_label_and_note() -> None:
    rows = _rows()
    assert_sources_list_every_file_once(CORPUS, rows)
    for row in rows:
        assert row["note"].strip(), row


def test_no_thread_is_shared_with_the_earlier_corpora() -> None:
    earlier = {thread_key(r["url"]) for name in EARLIER for r in _rows(FIXTURES / name)}
    earlier.discard(None)
    assert len(earlier) > 200, len(earlier)
    keys = {r["file"]: thread_key(r["url"]) for r in _rows()}
    assert None not in keys.values(), keys
    shared = sorted(name for name, key in keys.items() if key in earlier)
    assert not shared, shared


def test_corpus_is_large_and_varied_enough() -> None:
    labels = {label for _, label in FAILURES}
    assert len(FAILURES) >= 60 and len(labels) >= 18 and len(BENIGN) >= 10


def test_known_lists_name_files_of_the_corpus() -> None:
    assert set(KNOWN_MISSES) <= {name for name, _ in FAILURES}
    assert set(KNOWN_FALSE_ALARMS) <= set(BENIGN)


def test_every_log_but_the_known_ones_gets_its_root_cause_as_top_error() -> None:
    """Failure logs: their label on top at error level, with its line, text, explanation and
    fixes. Benign logs: nothing at error level (this corpus never asserted their live flags).
    The known misses and false alarms are left out: the rate test counts them."""
    table = {name: top_in({label}, error_only=True) for name, label in FAILURES}
    table |= {name: no_error(live_lines=False) for name in BENIGN}
    known = set(KNOWN_MISSES) | KNOWN_FALSE_ALARMS
    checked = {name: check for name, check in table.items() if name not in known}
    assert_no_misses("logcorpus4", table_misses(CORPUS, checked))


def test_rate_of_right_top_categories_holds_the_measured_floor() -> None:
    right = sum(top_category(name) == label for name, label in FAILURES)
    assert right / len(FAILURES) >= math.floor(100 * MEASURED_RATE) / 100, (right, len(FAILURES))


def score() -> tuple[dict[str, list[int]], dict[str, str], list[str]]:
    """Per label [right, total]; the misses with what diagnose said; benign false alarms."""
    table: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    misses: dict[str, str] = {}
    for name, label in FAILURES:
        got = top_category(name)
        table[label][0] += got == label
        table[label][1] += 1
        if got != label:
            misses[name] = got or "no error"
    alarms = [name for name in BENIGN if top_category(name) is not None]
    table["benign (no error)"] = [len(BENIGN) - len(alarms), len(BENIGN)]
    return table, misses, alarms


if __name__ == "__main__":
    table, misses, alarms = score()
    print(f"{'label':24} {'right/total':>11}")
    right = total = 0
    for label in sorted(table):
        hit, count = table[label]
        print(f"{label:24} {f'{hit}/{count}':>11}")
        if not label.startswith("benign"):
            right, total = right + hit, total + count
    print(f"failures: {right}/{total} ({100 * right / max(total, 1):.1f} %)")
    print(f"held out, the first measurement: {100 * HELD_OUT_RATE:.1f} %")
    for name, got in sorted(misses.items()):
        print(f"miss {name}: {got}")
    for name in alarms:
        print(f"false alarm {name}: {top_category(name)}")
    sys.exit(0)
