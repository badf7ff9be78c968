"""The data's token lengths, and what they mean for real (non-pad) throughput.

FastChat pads every conversation to ``model_max_length``; packing fills rows of ``pack_tokens``
with whole conversations. Both are arithmetic over the length distribution: the padding
fraction, the packed rows' fill (the entry's own best-fit packing, run on the lengths), the
mean attended length (attention cost per token) and the real tokens in an epoch.

Lengths come from the data check (``trainwiz data check FILE --model DIR --json``: the token
length of every conversation under FastChat's template) or, when none was measured, from the
ShareGPT-like default that the benchmark generator also uses (stated, and said so in the plan).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from backend.entry.packing import pack_lengths
from backend.errors import BadInput
from backend.i18n import _

# ShareGPT after FastChat's split, as measured in the notes (performance-real-data.md): token
# lengths lognormal, median ~700; sigma 0.8 puts ~9 % at or above 2048 and the mean of the
# lengths truncated at 2048 at ~860.
SHAREGPT_MEDIAN = 700
SHAREGPT_SIGMA = 0.8
# Lengths used for the packing simulation: beyond this a random sample is as good as all.
MAX_SIMULATED = 20000


def sharegpt_lengths(n: int, seed: int = 0, median: int = SHAREGPT_MEDIAN,
                     sigma: float = SHAREGPT_SIGMA, floor: int = 16) -> list[int]:  # fmt: skip
    """``n`` token lengths drawn from the ShareGPT-like lognormal (untruncated)."""
    rng = random.Random(seed)
    mu = math.log(median)
    return [max(floor, round(rng.lognormvariate(mu, sigma))) for _ in range(n)]


@dataclass(frozen=True)
class LengthDist:
    """Raw (untruncated) token lengths of the training conversations."""

    lengths: tuple[int, ...]
    source: str
    records: int | None = None  # conversations in the data set (None: len(lengths))
    # (sum, sum of squares, count) of the lengths truncated at each seq asked: tune asks the
    # same few seqs thousands of times (a pass over the lengths each was 90 % of its search)
    _sums: dict[int, tuple[int, int, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )
    _fills: dict[tuple[int, int], float] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    @property
    def n(self) -> int:
        return self.records if self.records is not None else len(self.lengths)

    def truncated(self, seq: int) -> list[int]:
        return [min(x, seq) for x in self.lengths]

    def sums(self, seq: int) -> tuple[int, int, int]:
        got = self._sums.get(seq)
        if got is None:
            t = self.truncated(seq)
            got = (sum(t), sum(x * x for x in t), len(t))
            self._sums[seq] = got
        return got

    def mean_tokens(self, seq: int) -> float:
        total, _squares, count = self.sums(seq)
        return total / count if count else 0.0

    def padding_fraction(self, seq: int) -> float:
        """Share of a padded batch's tokens that are padding (FastChat pads to ``seq``)."""
        return 1.0 - self.mean_tokens(seq) / seq if seq else 0.0

    def attended(self, seq: int) -> float:
        """Mean length a token attends over (E[l^2]/E[l]): attention FLOPs per packed token."""
        total, squares, _count = self.sums(seq)
        return squares / total if total else 0.0

    def packed_fill(self, seq: int, budget: int) -> float:
        got = self._fills.get((seq, budget))
        if got is None:
            got = self._fills[(seq, budget)] = _fill(self.lengths[:MAX_SIMULATED], seq, budget)
        return got

    def epoch_tokens(self, seq: int) -> float:
        """Real tokens in one pass over the data (the mean scaled to the record count)."""
        return self.mean_tokens(seq) * self.n


@lru_cache(maxsize=256)
def _fill(lengths: tuple[int, ...], seq: int, budget: int) -> float:
    truncated = [min(x, seq) for x in lengths]
    rows = pack_lengths(truncated, budget)
    return sum(truncated) / (len(rows) * budget) if rows else 0.0


def default_dist() -> LengthDist:
    return LengthDist(
        tuple(sharegpt_lengths(4000)),
        source=f"assumed ShareGPT-like (lognormal, median {SHAREGPT_MEDIAN}, sigma "
        f"{SHAREGPT_SIGMA}); measure yours with `trainwiz data check FILE --model DIR --json`",
    )


def dist_from_report(path: str | Path) -> LengthDist:
    """Lengths from a saved ``trainwiz data check --json`` report; BadInput names what is missing."""
    target = Path(path).expanduser()
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(
            _("--lengths {target}: cannot read a data check JSON report ({exc})").format(
                target=target, exc=exc
            )
        ) from exc
    tokens = data.get("tokens") if isinstance(data, dict) else None
    lengths = tokens.get("lengths") if isinstance(tokens, dict) else None
    if not lengths:
        raise BadInput(
            _(
                "--lengths {target}: no tokens.lengths in it: run `trainwiz data check FILE "
                "--model DIR --json` (token statistics need the model's tokenizer)"
            ).format(target=target)
        )
    return LengthDist(tuple(int(x) for x in lengths), source=f"measured ({target})",
                      records=int(data.get("n_records") or len(lengths)))  # fmt: skip
