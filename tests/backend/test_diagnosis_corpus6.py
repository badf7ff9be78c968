"""Held-out measurement on a sixth corpus (tests/fixtures/logcorpus6, its README.md says how it
was collected): 70 excerpts from 70 public threads no earlier corpus uses, collected by someone
who had not read the signatures (65 failures over 32 categories, 3 of them fatal failures of
kinds no category covers, and 5 benign logs).

Measured before any change (commit 77e3e1e): 49 of 70 strict (70.0 %), 5 of 5 benign clean.
Measured after the config checks, chat templates' own errors, NCCL's CUDA OOM and socket calls,
torch.save's unopenable file, the HF metrics block, the shell's EACCES, pip's and uv's flash-attn
build failures and the fault signals (each written from the component's own message, not from
these logs): 64 of 70 (91.4 %), 5 of 5 benign clean. That is no longer a held-out figure.
The misses are listed below with what diagnose says instead; a miss that starts passing is
welcome (take it out of the dict then), a new miss fails here.
``python -m tests.backend.test_diagnosis_corpus6`` prints the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.backend.logcorpora import HeldOut

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "logcorpus6"
EARLIER = ("logcorpus", "logcorpus2", "logcorpus3", "logcorpus4", "logcorpus5")

# The misses left after the second measurement: file -> the top error-level category diagnose
# gives ("no error" when nothing reached error severity).
KNOWN_MISSES: dict[str, str] = {
    "fp16_unscale/qwen-vl-finetune-184-v100-clip-grad-norm.log": "no error",
    "tokenization_mismatch/vip-llava-31-phi3-stage2-mismatch.log": "no error",
    "peft_target_modules/llamafactory-2401-qwen-q-proj-v-proj-traceback.log": "no error",
    "io_error/mask-rcnn-2880-read-only-logdir-jupyter.log": "no error",
    "io_error/nemo-launcher-74-pyxis-read-only-outputs.log": "unrecognised_failure",
    "rendezvous_timeout/chinese-llama-alpaca2-274-master-rendezvous-timeout.log": "no error",
}
HELD_OUT_RATE = 49 / 70  # right / all logs on the first (held-out) measurement
MEASURED_RATE = 64 / 70  # the floor this corpus holds now

HELD = HeldOut(CORPUS, KNOWN_MISSES)


def test_sources_list_every_file_once_and_share_no_thread_with_the_earlier_corpora() -> None:
    HELD.assert_sources(EARLIER)


def test_every_log_but_the_known_misses_gets_its_root_cause_as_top_error() -> None:
    HELD.assert_top_errors()


def test_rate_holds_the_measured_floor() -> None:
    HELD.assert_rate(MEASURED_RATE)


if __name__ == "__main__":
    HELD.print_table(HELD_OUT_RATE)
    sys.exit(0)
