#!/usr/bin/env python
"""Conversation data with a stated token-length distribution (ShareGPT-like by default).

Writes a FastChat JSON list of multi-turn human/gpt conversations whose lengths follow the
planner's ShareGPT-like lognormal (``backend.planner.realdata``: median 700 tokens, sigma 0.8,
so ~9 % reach 2048 and the mean truncated at 2048 is ~860). Text is drawn from a fixed word
list, so a tokenizer trained on the data (trainwiz's tiny-model maker) gives about one token per
word: the target lengths hold in tokens to within the template's overhead. Check them with
``trainwiz data check OUT --model DIR --json`` (its tokens.lengths is what the planner reads).

    python benchmarks/make_conversations.py OUT.json [--n 1500] [--median 700] [--sigma 0.8]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.planner.realdata import SHAREGPT_MEDIAN, SHAREGPT_SIGMA, sharegpt_lengths

SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ne",
    "su",
    "ra",
    "ti",
    "po",
    "de",
    "fa",
    "gu",
    "hi",
    "jo",
    "be",
    "ny",
    "ze",
    "qu",
    "wa",
    "xi",
    "ve",
]
TEMPLATE_TOKENS = 45  # vicuna_v1.1 system prompt + role names, about
WORDS = sorted({a + b + c for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES[:5]})


def conversation(rng: random.Random, tokens: int, index: int) -> dict[str, object]:
    """One to four turn pairs; answers carry ~80 % of the words, as in chat data."""
    words = max(8, tokens - TEMPLATE_TOKENS)
    pairs = rng.choice((1, 1, 2, 2, 3, 4))
    per_pair = words / pairs
    turns = []
    for _ in range(pairs):
        ask = max(3, int(per_pair * 0.2))
        answer = max(3, int(per_pair) - ask - 4)
        turns.append({"from": "human", "value": " ".join(rng.choices(WORDS, k=ask)) + "?"})
        turns.append({"from": "gpt", "value": " ".join(rng.choices(WORDS, k=answer)) + "."})
    return {"id": f"bench_{index:06d}", "conversations": turns}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--median", type=int, default=SHAREGPT_MEDIAN)
    parser.add_argument("--sigma", type=float, default=SHAREGPT_SIGMA)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    lengths = sharegpt_lengths(args.n, args.seed, args.median, args.sigma, floor=64)
    rng = random.Random(args.seed + 1)
    data = [conversation(rng, n, i) for i, n in enumerate(lengths)]
    args.out.write_text(json.dumps(data), encoding="utf-8")
    mean = sum(min(x, 2048) for x in lengths) / len(lengths)
    long = sum(x >= 2048 for x in lengths) / len(lengths)
    print(f"{args.out}: {args.n} conversations, target tokens median {args.median}, sigma "
          f"{args.sigma}: mean truncated at 2048 {mean:.0f}, {long:.1%} reach 2048")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
