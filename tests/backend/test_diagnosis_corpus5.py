"""Held-out measurement on a fifth corpus (tests/fixtures/logcorpus5, its README.md says how it
was collected): 118 excerpts from 118 public threads no earlier corpus uses (20 more that turned
out to share a thread with an earlier corpus were taken out before scoring), collected by
someone who had not read the signatures. 30 are of five kinds the classifier had no category
for (gpu_hardware, illegal_memory_access, fp16_unscale, io_error, network_unreachable), 9 are
fatal failures of kinds no category covers (the top finding must be an error-level
``unrecognised_failure``: never silent), 10 are benign.

Measured before any change (commit 9b69818): 65 of 118 strict (55.1 %): 64 of 79 on the
categories that existed (benign included, 10 of 10 clean), 0 of 30 on the new kinds, 1 of 9
unrecognised. Then the five categories were written from the libraries' and the driver's own
message texts, never from these logs, and the corpus measured again: 93 of 118 (78.8 %), 28 of
30 on the new kinds, the rest unchanged. Then (with logcorpus6's first measurement) the config
checks of DeepSpeed, transformers and accelerate, chat templates' own errors, NCCL's CUDA OOM,
torch.save's unopenable file, the HF metrics block's NaN loss, the shell's EACCES, pip's and uv's
failed flash-attn builds, fault signals and cut tracebacks' last lines were written from those
components' own messages, never from these logs: 100 of 118. Then (with logcorpus7's first
measurement) torch's device check standing alone as the last line of a cut traceback: 102 of
118. The misses left are listed below with what diagnose
says instead; a miss that starts passing is welcome (take it out of the dict then), a new miss
fails here. ``python -m tests.backend.test_diagnosis_corpus5`` prints the table.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.backend.logcorpora import HeldOut

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "logcorpus5"
EARLIER = ("logcorpus", "logcorpus2", "logcorpus3", "logcorpus4")

# The misses of the second measurement: file -> the top error-level category diagnose gives
# ("no error" when nothing reached error severity).
KNOWN_MISSES: dict[str, str] = {
    "gpu_hardware/returnn-1486-nvidia-smi-unknown-pcie-aer.log": "no error",
    "network_unreachable/accelerate-2468-pdsh-no-route-to-host.log": "rendezvous_timeout",
    "version_mismatch/llava-llama3-5-use-seedable-sampler.log": "unrecognised_failure",
    "version_mismatch/granite-tsfm-22-jupyter-accelerator-kwarg.log": "no error",
    "flash_attn_build/openunlearning-50-nvcc-missing-py312.log": "no error",
    "flash_attn_runtime/deepseekcoder-19-lazy-import-traceback.log": "no error",
    "container_permission/immich-30680-rootless-podman-cache.log": "unrecognised_failure",
    "tokenization_mismatch/medicalgpt-115-loguru-chatglm2-1-vs-81.log": "no error",
    "chat_template/openr1-85-rank0-trl-format-dataset.log": "no error",
    "bitsandbytes_cuda/bnb-838-textgen-conda-libcudart-search.log": "no error",
    "hf_args/llmbook-56-japanese-notebook-evaluation-strategy.log": "no error",
    "chat_template/fastchat-1534-pad-token-wrapped-chinese.log": "chat_template_mask",
    "chat_template/transformers-2648-gpt2-pad-token-not-set.log": "no error",
    "unrecognised_failure/timellm-158-master-port-98-errno13.log": "no error",
    "unrecognised_failure/wedefense-47-random-port-374-denied.log": "no error",
    "unrecognised_failure/peft-137-seq2seq-lora-no-grad-fn.log": "no error",
}
HELD_OUT_RATE = 65 / 118  # right / all logs on the first (held-out) measurement
MEASURED_RATE = 102 / 118  # after logcorpus7's shapes (see the docstring)

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
