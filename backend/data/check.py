"""Check FastChat conversation data before hours are spent training on it.

Structural checks mirror what FastChat's ``preprocess`` does with each record: a first turn not
from ``human`` is silently dropped, any role other than human/gpt raises ``KeyError``, roles
that do not alternate raise ``AssertionError``, and an empty value breaks the masking walk (the
sample then trains on nothing). Every issue names the record index (and id). Token statistics
need the tokenizer, so they run in the training python (``_token_stats.py``), under the chat
template the run trains with (``template_choice``): FastChat's vicuna path, or the entry's exact
masks for any other template, with the unmaskable records and a few samples' trained text.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import stat
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from backend import subproc
from backend.entry.chat_masks import MOST_UNMASKABLE
from backend.entry.template_choice import (
    FASTCHAT_TEMPLATES,
    SETTINGS,
    TemplateError,
    decide,
    valid_setting,
)
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.model.tiny import training_python

HELPER = Path(__file__).with_name("_token_stats.py")
ROLES = ("human", "gpt")
MAX_LISTED = 200  # issues kept in the report; counts stay exact beyond it

Severity = Literal["error", "warning"]


class DataIssue(BaseModel):
    index: int
    id: str | None = None
    kind: str
    severity: Severity = "error"
    message: str

    def line(self) -> str:
        ident = f" (id {self.id})" if self.id is not None else ""
        return f"record {self.index}{ident}: {self.kind}: {self.message}"


class UnmaskableRecord(BaseModel):
    index: int
    id: str | None = None
    reason: str


class Segment(BaseModel):
    text: str
    trained: bool = Field(..., description="the loss is on this text (else masked)")


class MaskSample(BaseModel):
    index: int
    id: str | None = None
    segments: list[Segment] = Field(default_factory=list)


class TokenStats(BaseModel):
    model_max_length: int
    tokenizer_class: str
    template_source: str = Field(
        ..., description="fastchat (its own template), replica, or tokenizer (the model's own)"
    )
    chat_template: str = Field(
        "vicuna", description="the template the run trains with: vicuna, model or a FastChat name"
    )
    chat_template_reason: str = ""
    n: int
    mean: float
    p50: int
    p90: int
    p99: int
    max: int
    truncated: int
    truncated_share: float
    truncated_indexes: list[int] = Field(default_factory=list)
    mismatched: int = Field(
        0, description="records FastChat would mask out (tokenization mismatch)"
    )
    mismatched_indexes: list[int] = Field(default_factory=list)
    lengths: list[int] = Field(
        default_factory=list,
        description="token length of every conversation checked (untruncated): the planner's "
        "padding, packing and real-throughput predictions read it",
    )
    pad_token: str = Field("", description="the pad token a non-vicuna run uses, and why")
    unmaskable: int = Field(
        0, description="conversations the template's masks cannot locate exactly (training skips)"
    )
    unmaskable_records: list[UnmaskableRecord] = Field(default_factory=list)
    truncated_away: int = Field(
        0, description="conversations with no reply within model_max_length (training skips)"
    )
    samples: list[MaskSample] = Field(
        default_factory=list, description="a few conversations as trained and masked text"
    )

    @property
    def mostly_unmaskable(self) -> bool:
        """More than half the checked conversations unmaskable: the launch refuses the data."""
        return self.unmaskable > MOST_UNMASKABLE * (self.n + self.unmaskable)


class DataReport(BaseModel):
    path: str
    n_records: int = 0
    n_turns: int = 0
    counts: dict[str, int] = Field(default_factory=dict, description="issues by kind")
    issues: list[DataIssue] = Field(default_factory=list)
    tokens: TokenStats | None = None
    tokens_unavailable: str | None = Field(None, description="why no token statistics")

    @property
    def errors(self) -> int:
        return sum(1 for i in self.issues if i.severity == "error")

    @property
    def ok(self) -> bool:
        """No structural error, no record that FastChat would mask out entirely, and not more
        than half the records unmaskable under the run's chat template."""
        return self.errors == 0 and (
            self.tokens is None
            or (self.tokens.mismatched == 0 and not self.tokens.mostly_unmaskable)
        )


def _record_issues(index: int, record: Any, seen_ids: dict[str, int]) -> list[DataIssue]:
    if not isinstance(record, dict):
        return [DataIssue(index=index, kind="not_object", message="a record must be an object")]
    raw_id = record.get("id")
    rid = None if raw_id is None else str(raw_id)
    out: list[DataIssue] = []

    def add(kind: str, message: str, severity: Severity = "error") -> None:
        out.append(DataIssue(index=index, id=rid, kind=kind, severity=severity, message=message))

    if rid is None:
        add(
            "missing_id",
            "no 'id' (FastChat does not need it, but errors cannot cite it)",
            "warning",
        )
    elif rid in seen_ids:
        add("duplicate_id", f"same id as record {seen_ids[rid]}", "warning")
    else:
        seen_ids[rid] = index
    conv = record.get("conversations")
    if conv is None:
        add("no_conversations", "no 'conversations' list (FastChat raises KeyError)")
        return out
    if not isinstance(conv, list) or not conv:
        add("empty_conversations", "'conversations' must be a non-empty list (IndexError)")
        return out
    turns = conv
    for t, turn in enumerate(turns):
        if not isinstance(turn, dict) or "from" not in turn or "value" not in turn:
            add("bad_turn", f"turn {t} must be an object with 'from' and 'value'")
            return out
        if turn["from"] not in ROLES:
            add("unknown_role", f"turn {t} is from {turn['from']!r}; only human/gpt (KeyError)")
            return out
    if turns[0]["from"] != "human":
        add("first_not_human", "turn 0 is from 'gpt': FastChat silently drops it", "warning")
        turns = turns[1:]
        if not turns:
            return out
    for t, turn in enumerate(turns):
        want = ROLES[t % 2]
        if turn["from"] != want:
            add("not_alternating", f"turn {t} is from {turn['from']!r}, expected {want!r}")
            break
    for t, turn in enumerate(turns):
        value = turn["value"]
        if not isinstance(value, str):
            add("non_string_value", f"turn {t} value is {type(value).__name__}, not text")
        elif not value.strip():
            add("empty_value", f"turn {t} is empty (breaks FastChat's masking: trains on nothing)")
    if turns[-1]["from"] == "human":
        add("ends_with_human", "last turn is from human: it has no answer to learn", "warning")
    return out


def data_file_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a FastChat data file, in words that name what it is (a
    directory, a FIFO, a device, an empty file), or None. Never opens anything but a regular
    file: /dev/zero or a FIFO would be read forever."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return _("{path} does not exist").format(path=path)
    except OSError as exc:
        return _("{path} cannot be read: {why}").format(path=path, why=exc.strerror)
    if stat.S_ISDIR(info.st_mode):
        return _("{path} is a directory, not a JSON file").format(path=path)
    if stat.S_ISFIFO(info.st_mode):
        return _("{path} is a FIFO (a pipe), not a JSON file").format(path=path)
    if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
        return _("{path} is a device, not a JSON file").format(path=path)
    if not stat.S_ISREG(info.st_mode):
        return _("{path} is not a regular file").format(path=path)
    if info.st_size == 0:
        return _("{path} is empty (0 bytes): FastChat needs a JSON list of conversations").format(
            path=path
        )
    return None


def load_records(path: Path) -> list[Any]:
    problem = data_file_problem(path)
    if problem:
        raise BadInput(_("data file: {problem}: fix training.data_path").format(problem=problem))
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadInput(
            _("{path} is not valid JSON ({exc}): FastChat needs a JSON list").format(
                path=path, exc=exc
            )
        ) from exc
    if not isinstance(data, list):
        raise BadInput(
            _("{path}: top level is {name}, FastChat needs a JSON list").format(
                path=path, name=type(data).__name__
            )
        )
    return data


def check_data(
    path: str | Path,
    model_dir: str | Path | None = None,
    max_length: int = 512,
    python: str | None = None,
    chat_template: str = "auto",
) -> DataReport:
    """Check every record; with ``model_dir``, add token statistics from its tokenizer under the
    chat template the run would train with (``chat_template``: the preset's setting)."""
    check_template_setting(chat_template)
    file = Path(path).expanduser()
    records = load_records(file)
    report = DataReport(path=str(file), n_records=len(records))
    seen: dict[str, int] = {}
    bad: set[int] = set()
    counts: Counter[str] = Counter()
    for index, record in enumerate(records):
        if isinstance(record, dict) and isinstance(record.get("conversations"), list):
            report.n_turns += len(record["conversations"])
        for issue in _record_issues(index, record, seen):
            counts[issue.kind] += 1
            if issue.severity == "error":
                bad.add(index)
            if len(report.issues) < MAX_LISTED:
                report.issues.append(issue)
    report.counts = dict(counts)
    if model_dir is not None and not Path(model_dir).expanduser().is_dir():
        raise BadInput(
            _("model directory {model_dir} does not exist: fix --model").format(model_dir=model_dir)
        )
    if model_dir is not None:
        try:
            decide(chat_template, str(Path(model_dir).expanduser()))
        except TemplateError as exc:  # e.g. `model` for a tokenizer without a template
            raise BadInput("--" + str(exc).replace("chat_template", "chat-template", 1)) from None
        try:
            report.tokens = token_stats(
                file, Path(model_dir), max_length, sorted(bad), python, chat_template
            )
        except TrainwizError as exc:
            report.tokens_unavailable = str(exc)
    return report


def check_template_setting(setting: str) -> None:
    """BadInput naming ``--chat-template`` and what it takes, for a setting no run accepts."""
    if valid_setting(setting):
        return
    close = difflib.get_close_matches(setting, [*SETTINGS, *FASTCHAT_TEMPLATES], n=1)
    raise BadInput(
        _(
            "--chat-template {setting}: use auto, vicuna, model or a FastChat template name "
            "(e.g. llama-2, mistral, qwen-7b-chat){hint}"
        ).format(
            setting=setting,
            hint=_("; did you mean {name}?").format(name=close[0]) if close else "",
        )
    )


def token_stats(
    file: Path,
    model_dir: Path,
    max_length: int,
    skip: list[int],
    python: str | None = None,
    chat_template: str = "auto",
) -> TokenStats:
    """Run the helper with the training python; a missing transformers is reported, not raised."""
    if not model_dir.is_dir():
        raise BadInput(
            _("model directory {model_dir} does not exist: fix --model").format(model_dir=model_dir)
        )
    job = {
        "data": str(file),
        "model": str(model_dir),
        "max_length": max_length,
        "skip": skip,
        "chat_template": chat_template,
    }
    argv = [training_python(python), str(HELPER), json.dumps(job)]
    # Tokenizers need no framework: USE_TORCH=0 saves seconds of importing torch.
    env = dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        TRANSFORMERS_VERBOSITY="error",
        USE_TORCH="0",
        USE_TF="0",
        USE_FLAX="0",
    )
    proc = subproc.probe(argv, 1800, env=env)
    if proc.error is not None:
        raise TrainwizError(
            _("could not run the training python {value}: {exc}").format(
                value=argv[0], exc=proc.error
            )
        ) from proc.error
    if proc.code != 0:
        if "No module named 'transformers'" in proc.stderr:
            raise TrainwizError(
                _("token statistics need transformers in the training python ({value})").format(
                    value=argv[0]
                )
            )
        if "No module named 'fastchat'" in proc.stderr:
            raise TrainwizError(
                _(
                    "chat template {template} is FastChat's: it needs fschat in the training "
                    "python ({value})"
                ).format(template=chat_template, value=argv[0])
            )
        tail = "\n".join(proc.stderr.strip().splitlines()[-4:])
        raise TrainwizError(
            _("loading the tokenizer from {model_dir} failed:\n{tail}").format(
                model_dir=model_dir, tail=tail
            )
        )
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    lengths = sorted(out["lengths"]) or [0]

    def pct(q: float) -> int:  # nearest rank
        return int(lengths[max(0, math.ceil(q * len(lengths)) - 1)])

    n = len(out["lengths"])
    return TokenStats(
        model_max_length=max_length,
        tokenizer_class=out["tokenizer_class"],
        template_source=out["template_source"],
        n=n,
        mean=round(statistics.fmean(lengths), 1),
        p50=pct(0.5),
        p90=pct(0.9),
        p99=pct(0.99),
        max=lengths[-1],
        truncated=len(out["truncated"]),
        truncated_share=round(len(out["truncated"]) / n, 4) if n else 0.0,
        truncated_indexes=out["truncated"][:MAX_LISTED],
        mismatched=len(out["mismatched"]),
        mismatched_indexes=out["mismatched"][:MAX_LISTED],
        lengths=[int(x) for x in out["lengths"]],
        chat_template=out.get("chat_template", "vicuna"),
        chat_template_reason=out.get("chat_template_reason", ""),
        pad_token=out.get("pad_token", ""),
        unmaskable=len(out.get("unmaskable", [])),
        unmaskable_records=out.get("unmaskable", [])[:MAX_LISTED],
        truncated_away=len(out.get("truncated_away", [])),
        samples=out.get("samples", []),
    )
