"""The tiny model of the embedded default, made locally so that ``tiny-cpu`` needs no network.

The spec's ``family`` picks whose tokenizer, chat template and config it copies (llama2, the
default, is the sentencepiece Llama it always was; llama3, qwen2, mistral and gemma2 get a
trained ``tokenizers`` tokenizer with the family's special tokens and chat template).
The work runs in a subprocess with the training python (torch, transformers, sentencepiece are
never imported by the wizard). Idempotent: a directory made from the same spec that validates
is kept as is.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from backend import subproc
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.model.placeholders import SAMPLE_CONVERSATIONS
from backend.model.validate import ModelReport, validate_model_dir
from backend.preset.schema import TinyModelSpec

SCRIPT = Path(__file__).with_name("_make_tiny.py")
MARKER = "trainwiz-tiny.json"


def training_python(explicit: str | None = None) -> str:
    """The interpreter of the training environment: explicit, $TRAINWIZ_TRAINING_PYTHON, or ours."""
    return explicit or os.environ.get("TRAINWIZ_TRAINING_PYTHON") or sys.executable


@dataclass
class TinyResult:
    dir: str
    created: bool
    report: ModelReport


def tiny_is_current(target: Path, spec: TinyModelSpec) -> bool:
    """True when ``target`` holds a valid tiny model made from exactly ``spec``."""
    try:
        marker = json.loads((target / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    made = marker.get("spec") if isinstance(marker, dict) else None
    if isinstance(made, dict) and "family" not in made:
        made = {"family": "llama2", **made}  # made before the spec had families: a Llama 2
    return made == spec.model_dump() and validate_model_dir(target).ok


# What the tiny model script writes (a marker made before it listed its files means these).
TINY_FILES = frozenset(
    {
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.model",
        "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json",
        "added_tokens.json", "chat_template.jinja", MARKER,
    }
)  # fmt: skip


def made_files(path: Path) -> frozenset[str]:
    """The names in ``path`` that trainwiz's tiny model script wrote (its marker lists them)."""
    try:
        marker = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return frozenset()
    listed = marker.get("files") if isinstance(marker, dict) else None
    if isinstance(listed, list) and all(isinstance(n, str) for n in listed):
        return frozenset({*listed, MARKER})
    return TINY_FILES


def refuse_foreign_dir(path: Path, force: bool = False) -> None:
    """Only an empty or missing directory, or one trainwiz made (it holds MARKER) and that
    holds nothing else, is replaced: the model is swapped in whole, so anything else there
    would be deleted. A user's file beside a tiny model needs ``--force``."""
    if path.is_symlink():
        raise BadInput(
            _("model dir {path}: is a symlink; name the real directory").format(path=path)
        )
    if path.exists() and not path.is_dir():
        raise BadInput(
            _("model dir {path}: exists and is not a directory; pick another path").format(
                path=path
            )
        )
    if path.is_dir() and any(path.iterdir()) and not (path / MARKER).is_file():
        raise BadInput(
            _(
                "model dir {path}: not empty and not made by trainwiz (no {MARKER}): nothing "
                "there is deleted; pick an empty or new directory (e.g. @home/models/tiny-llama)"
            ).format(path=path, MARKER=MARKER)
        )
    if path.is_dir() and not force:
        extra = sorted(n for n in os.listdir(path) if n not in made_files(path))
        if extra:
            raise BadInput(
                _(
                    "model dir {path}: holds files trainwiz did not make ({names}); remaking the "
                    "tiny model replaces the folder: move them away, or pass --force to delete them"
                ).format(path=path, names=", ".join(extra[:5]) + (" ..." if len(extra) > 5 else ""))
            )


def make_tiny(
    target: str | Path,
    spec: TinyModelSpec | None = None,
    data: str | Path | None = None,
    python: str | None = None,
    force: bool = False,
) -> TinyResult:
    """Create (or keep) the tiny model of ``spec.family`` (a Llama 2 by default) at ``target``;
    its tokenizer is trained on ``data``."""
    spec = spec or TinyModelSpec()
    path = Path(target).expanduser()
    here = Path.cwd().resolve()
    if path.resolve() == here or path.resolve() in here.parents:
        raise BadInput(  # the folder is replaced whole: never the one the user stands in
            _(
                "model dir {path}: is this folder or one above it, and making the tiny model "
                "replaces the folder: name a folder of its own (e.g. {example})"
            ).format(path=target, example=Path(target) / "tiny-llama")
        )
    if not force and tiny_is_current(path, spec):
        return TinyResult(str(path), False, validate_model_dir(path))
    refuse_foreign_dir(path, force)
    job = {
        "dir": str(path),
        "data": str(data or SAMPLE_CONVERSATIONS),
        "spec": spec.model_dump(),
        # What the script may delete when it swaps the new model in (force: everything).
        "replaceable": None if force else sorted(made_files(path)),
    }
    argv = [training_python(python), str(SCRIPT), json.dumps(job)]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    proc = subproc.probe(argv, 600, env=env)
    if proc.error is not None:
        raise TrainwizError(
            _("could not run the training python {value}: {exc}").format(
                value=argv[0], exc=proc.error
            )
        ) from proc.error
    if proc.code != 0:
        # one line: the error the script ended with (its traceback is not the user's to read)
        lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
        last = lines[-1] if lines else _("exit status {code}").format(code=proc.code)
        hint = ""
        if "ModuleNotFoundError" in proc.stderr:
            hint = " (the training python lacks torch/transformers/sentencepiece: set up the env)"
        raise TrainwizError(
            _("making the tiny model failed{hint}: {tail}").format(hint=hint, tail=last)
        )
    report = validate_model_dir(path)
    if not report.ok:
        raise TrainwizError(
            _("the tiny model was made but does not validate: ") + report.problems[0]
        )
    return TinyResult(str(path), True, report)
