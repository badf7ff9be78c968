"""Token lengths of FastChat conversations under the vicuna_v1.1 template (training python only).

Self-contained: run as ``python _token_stats.py JOB_JSON`` with the training environment's
interpreter (the wizard never imports transformers). JOB_JSON = {"data", "model", "max_length",
"skip": [record indexes to ignore]}. Mirrors FastChat's ``preprocess`` (slow tokenizer,
pad = unk, truncation at model_max_length, the masking walk that yields "tokenization mismatch")
without torch, and prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from typing import Any

SYSTEM = (
    "A chat between a curious user and an artificial intelligence assistant. "
    "The assistant gives helpful, detailed, and polite answers to the user's questions."
)


def _template() -> tuple[str, Any, str, str, str]:
    """FastChat's own template when installed, else an identical replica of vicuna_v1.1."""
    try:
        # The template FastChat's preprocess gets via get_conversation_template("vicuna"); the
        # light module, since model_adapter imports torch and every model family.
        from fastchat.conversation import get_conv_template

        conv = get_conv_template("vicuna_v1.1")
        return conv.system_message, conv.roles, conv.sep, conv.sep2, "fastchat"
    except Exception:
        return SYSTEM, ("USER", "ASSISTANT"), " ", "</s>", "replica"


def _prompt(source: list[dict[str, Any]], system: str, roles: Any, sep: str, sep2: str) -> str:
    names = {"human": roles[0], "gpt": roles[1]}
    if names[source[0]["from"]] != roles[0]:
        source = source[1:]
    ret = system + sep
    for j, turn in enumerate(source):
        msg = turn["value"]
        ret += names[turn["from"]] + ": " + msg + (sep, sep2)[j % 2] if msg else roles[j % 2] + ":"
    return ret


def _mismatch(
    conversation: str,
    ids: list[int],
    tokenizer: Any,
    max_length: int,
    roles: Any,
    sep: str,
    sep2: str,
) -> bool:
    """FastChat's masking walk: True when its lengths disagree (the sample then trains on nothing)."""
    truncated = ids[:max_length]
    total_len = sum(1 for t in truncated if t != tokenizer.pad_token_id)
    split_sep = sep + roles[1] + ": "
    cur_len = 1
    legacy = getattr(tokenizer, "legacy", True)
    for i, turn in enumerate(conversation.split(sep2)):
        if turn == "":
            break
        turn_len = len(tokenizer(turn).input_ids)
        if len(turn.split(split_sep)) != 2:
            break
        cur_len += turn_len
        if i != 0 and not legacy:
            cur_len -= 1
    return cur_len < max_length and cur_len != total_len


def main() -> None:
    job = json.loads(sys.argv[1])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        job["model"], use_fast=False, model_max_length=job["max_length"], padding_side="right"
    )
    tokenizer.pad_token = tokenizer.unk_token
    system, roles, sep, sep2, source = _template()
    with open(job["data"], encoding="utf-8") as fh:
        records = json.load(fh)
    skip = set(job.get("skip", []))
    max_length = job["max_length"]
    lengths, truncated, mismatched = [], [], []
    for index, record in enumerate(records):
        if index in skip:
            continue
        conversation = _prompt(record["conversations"], system, roles, sep, sep2)
        ids = tokenizer(conversation).input_ids
        lengths.append(len(ids))
        if len(ids) > max_length:
            truncated.append(index)
        elif _mismatch(conversation, ids, tokenizer, max_length, roles, sep, sep2):
            mismatched.append(index)
    print(
        json.dumps(
            {
                "template_source": source,
                "tokenizer_class": type(tokenizer).__name__,
                "lengths": lengths,
                "truncated": truncated,
                "mismatched": mismatched,
            }
        )
    )


if __name__ == "__main__":
    main()
