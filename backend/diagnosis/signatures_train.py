"""Signatures of failures while fetching or training: Hub access, GPU architecture, NaN loss.

Same conventions as ``signatures.py`` (each pattern quotes the component's own message;
anchors are substrings of every match); ``signatures.py`` places these tuples in its order.
"""

from __future__ import annotations

import re

from backend.diagnosis.sigbase import Marker, Signature
from backend.diagnosis.sigbase import sig as _sig
from backend.i18n import N_

# huggingface_hub / transformers refusing a download: gated or private repos, bad tokens.
HUB: tuple[Signature, ...] = (
    _sig(
        "hub_auth",
        "error",
        N_("The Hugging Face Hub refused access to the model"),
        r"GatedRepoError|Cannot access gated repo|Access to model \S+ is restricted"
        r"|is gated\. You must (?:be authenticated|have access)|not in the authorized list"
        r"|RepositoryNotFoundError|Repository Not Found for url|\b40[13] Client Error"
        r"|Invalid username or password|Invalid user token|Invalid credentials in Authorization"
        # transformers' own wording, and the Hub's fine-grained-token refusal
        r"|You are trying to access a gated repo|If this is a private repository, make sure to"
        r" pass a token|\b403 Forbidden\b",
        (
            "GatedRepoError",
            "Cannot access gated",
            "Access to model",
            "is gated. You must",
            "RepositoryNotFound",
            "Repository Not Found",
            "Client Error",
            "Invalid username",
            "Invalid user token",
            "Invalid credentials",
            "You are trying to access a gated",
            "If this is a private repository",
            "Forbidden",
        ),
    ),
)

# A folder the run writes to (the Hub cache, output_dir) belongs to another user: a bind mount
# made by root, or an image whose user is not the folder's owner. Python's own exception is the
# failure; the Hub's "Ignored error ... Errno 13" and transformers' "write in your cache folder"
# are said while the run goes on (warnings: the download may still fail later).
FOLDERS: tuple[Signature, ...] = (
    _sig(
        "container_permission",
        "error",
        N_("A folder the run writes to is not writable"),
        r"(?:PermissionError|OSError): \[Errno 13\] Permission denied: '(?P<path>[^']+)'",
        ("Errno 13",),
    ),
    _sig(
        "container_permission",
        "warning",
        N_("A cache folder is not writable"),
        r"(?:Ignored error while writing|Will ignore error and continue).{0,400}?\[Errno 13\]"
        r" Permission denied: '(?P<path>[^']+)'"
        r"|trying to write in your cache folder \((?P<path2>[^)]+)\)",
        ("Errno 13", "write in your cache folder"),
    ),
)

# The GPU is newer (or older) than what this torch build / dtype / kernel supports.
# (FlashAttention's own "only supports Ampere" stays flash_attn_runtime: it comes first.)
ARCH: tuple[Signature, ...] = (
    _sig(
        "cuda_arch",
        "error",
        N_("This torch build has no kernels for the GPU's architecture"),
        r"no kernel image is available for execution on the device"
        r"|with CUDA capability (?P<sm>sm_\d+) is not compatible with the current PyTorch installation"
        r"|CUDA error: invalid device function|PyTorch no longer supports this GPU"
        # JIT compilers (triton/nvrtc) that do not know the GPU yet
        r"|Value 'sm_\d+' is not defined for option 'gpu-name'|invalid value for --gpu-architecture",
        (
            "image is available for execution",
            "current PyTorch installation",
            "invalid device function",
            "PyTorch no longer supports",
            "Value 'sm_",
            "invalid value for --gpu-architecture",
        ),
    ),
    _sig(
        "cuda_arch",
        "error",
        N_("The GPU does not support bf16/tf32 (needs Ampere, sm80, or newer)"),
        r"(?i)Your setup doesn't support bf16|bf16 requested, but AMP is not supported|(?:--)?(?:bf16|tf32)"
        r" requires (?:Ampere|a newer GPU)|bfloat16 is only supported on gpus with compute capability"
        r"|bf16.{0,80}(?:only supported|not supported|requires).{0,60}(?:Ampere|compute capability)"
        r"|bf16 mixed precision requires PyTorch >= [\d.]+ and a supported device",
        (
            "Your setup",
            "mixed precision requires",
            "AMP is not supported",
            "requires Ampere",
            "requires a newer GPU",
            "compute capability",
            "Compute capability",
            "COMPUTE CAPABILITY",
            "Ampere",
        ),
    ),
)

_NONFINITE = r"(?:tensor\()?(?:nan|NaN|-?inf|-?Infinity)\b"
# Python's repr ('loss': nan), JSON ("loss": NaN) and tensors (tensor(nan, ...)).
_NONFINITE_ANCHORS = ("': nan", "': inf", "': -inf", '": NaN', '": Infinity', '": -Infinity',
                      "': tensor(nan", "': tensor(inf", "': tensor(-inf")  # fmt: skip
# "loss: nan" and its spellings, keyed from the word (scan.py), not from the colon
_COLON_LOSS = tuple(
    f"{first}oss{sep}{value}"
    for first in "lL"
    for sep in (": ", ":")
    for value in ("nan", "NaN", "inf", "-inf")
)
# A loss (or gradient norm) that is NaN/inf: in the entry's message, the HF Trainer's logged dict
# (Python repr: nan, inf; tensor(nan, ...)), metrics.jsonl (bare NaN in old runs; null next to a
# logged learning rate in new ones), and DeepSpeed's fp16 loss scaler giving up.
NAN: tuple[Signature, ...] = (
    _sig(
        "loss_nan",
        "error",
        N_("The loss became NaN/inf"),
        r"(?i:non-finite (?:loss|grad))"
        r"|['\"](?:loss|train_loss|eval_loss)['\"]\s*:\s*"
        + _NONFINITE
        + r"|\"loss\":\s*null,\s*\"learning_rate\":\s*-?\d"
        r"|Current loss scale already at minimum|Loss is (?:nan|NaN|inf)\b"
        r"|returned nan values in its \d+th output"
        # free-form progress lines: "step 2/39 loss nan", "total_loss: nan", "loss=nan" (tqdm)
        r"|\b(?:\w+_)?[Ll]oss(?: ?[:=] ?| )(?:nan|NaN|-?inf)\b",
        (
            "on-finite",
            *_NONFINITE_ANCHORS,
            '"loss": null',
            "Current loss scale",
            "Loss is nan",
            "Loss is NaN",
            "Loss is inf",
            "returned nan values",
            *("loss nan", "Loss nan", "=nan", "=NaN", "= nan", "=inf", "=-inf"),
            *_COLON_LOSS,
        ),
    ),
    _sig(
        "loss_nan",
        "warning",
        N_("The gradient norm is NaN/inf"),
        r"['\"]grad_norm['\"]\s*:\s*" + _NONFINITE,
        _NONFINITE_ANCHORS,
    ),
)

TRAIN_MARKERS: tuple[Marker, ...] = (
    # multiprocessing creating a semaphore (it lives in /dev/shm): an ENOSPC right after is shm.
    Marker("semlock", re.compile(r"SemLock"), ("SemLock",)),
)


# A tokenizer FastChat's vicuna-only train.py cannot mask or pad (Llama-3, Qwen, Gemma...), and
# the trainwiz entry refusing a template it cannot mask exactly (chat_masks.py).
TEMPLATES: tuple[Signature, ...] = (
    _sig(
        "chat_template_mask",
        "error",
        N_("The data cannot be masked or padded with this tokenizer and template"),
        r"Asking to pad but the tokenizer does not have a padding token"
        r"|(?:Fast|Tokenizer)\w*'? (?:object )?has no attribute '?legacy'?"
        r"|chat template (?P<template>[\w.-]+): \d+ of \d+ conversations cannot be masked exactly",
        ("Asking to pad", "attribute 'legacy'", "attribute legacy", "cannot be masked exactly"),
    ),
    # FastChat's train.py: "WARNING: tokenization mismatch: {cur_len} vs. {total_len}. #turn =
    # {n}. (ignored)", printed only below model_max_length. With one turn it is no odd sample
    # but the template's count (explain_config's "turn1"): an error at once, not after five.
    _sig(
        "tokenization_mismatch",
        "error",
        N_("FastChat's masking does not match the tokenizer"),
        r"tokenization mismatch: \d+ vs\. ?\d+\.?\s*#turn = (?P<turn1>1)\. \(ignored\)",
        ("tokenization mismatch",),
        window=1,
    ),
)
