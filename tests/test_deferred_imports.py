"""An import inside a function is a promise that putting it off is worth something: a heavy or
optional library, a CLI that starts without the parts a subcommand does not use, a screen that
loads only when its step opens. Everything else imports at module level, where a reader (and the
layer contracts) sees it. So each import inside a function either names its reason on its first
line (``# deferred: <why>``, a few words at least) or imports one of the heavy libraries below.

The wizard side only: ``backend/entry`` is the training side, copied into run directories.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("backend", "screens", "widgets", "tui")
TRAINING_SIDE = "backend/entry/"

# Third-party packages an import may put off without saying why here: the why is on each line.
# Figures: `python -X importtime -c "import X"` on the dev machine (cumulative).
HEAVY = {
    "torch": "the training stack, about 2 s; the wizard process never needs it",
    "transformers": "about 3.5 s, and pulls torch",
    "peft": "LoRA adapters: training side, pulls torch and transformers",
    "fastchat": "fschat's modules pull transformers; optional on the wizard side",
    "sentencepiece": "only to build a tiny tokenizer; optional",
    "modelscope": "about 1.8 s; optional, only for the ModelScope mirror",
    "huggingface_hub": "its utils alone take about 0.2 s; only when a model is fetched",
    "requests": "about 0.1 s; only the download worker and its error mapping use it",
    "docker": "the Docker SDK, about 0.15 s; a host without Docker still runs every check",
    "pynvml": "NVML binding; missing or failing on a host without an NVIDIA driver",
    "psutil": "about 30 ms; only the host probes read it",
    "uvicorn": "about 0.1 s; only `trainwiz serve` runs a web server",
    "textual": "about 0.13 s; the scripted subcommands never open the UI",
    "rich": "rich.console takes about 70 ms; only the tables of check/images print with it",
    "pydantic": "about 60 ms; `trainwiz diagnose FILE` starts without it",
}


REASON = re.compile(r"#\s*deferred:\s*(?P<why>.*)$")
MIN_REASON_WORDS = 3


def _sources() -> list[tuple[str, Path]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(TRAINING_SIDE):
                found.append((rel, path))
    return found


def _function_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import that runs only when a function (or a method, or a nested function) runs."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(tree, False)
    return found


def _top_package(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if node.level:
        return {"."}
    return {(node.module or "").split(".")[0]}


def _offence(node: ast.Import | ast.ImportFrom, first_line: str) -> str | None:
    """Why this import does not pass, or None when it does."""
    reason = REASON.search(first_line)
    if reason:
        words = re.findall(r"\w+", reason.group("why"))
        if len(words) >= MIN_REASON_WORDS:
            return None
        return "its '# deferred:' names no real reason"
    if _top_package(node) <= HEAVY.keys():
        return None
    return "no '# deferred: <why>' on its first line"


def _offenders() -> list[str]:
    out = []
    for rel, path in _sources():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node in _function_imports(ast.parse(text, filename=rel)):
            why = _offence(node, lines[node.lineno - 1])
            if why:
                out.append(f"{rel}:{node.lineno}: {lines[node.lineno - 1].strip()}  <- {why}")
    return out


def test_every_import_inside_a_function_says_why() -> None:
    offenders = _offenders()
    assert not offenders, (
        f"{len(offenders)} imports inside functions without a reason "
        "(move them to module level, or add '# deferred: <why>'):\n" + "\n".join(offenders)
    )


def test_the_check_tells_a_reason_from_a_bare_marker() -> None:
    """The rule itself: a reason passes, a bare or one-word marker does not, a heavy library
    passes, a trainwiz module without a reason does not; nested functions count."""
    source = (
        "import json\n"
        "def f():\n"
        "    import backend.plan  # deferred: the planner loads every method table\n"
        "    import backend.runs  # deferred: cycle\n"
        "    import torch\n"
        "    def g():\n"
        "        from backend import steps\n"
        "class C:\n"
        "    def m(self):\n"
        "        from . import sibling  # deferred:\n"
    )
    lines = source.splitlines()
    verdicts = [
        (node.lineno, _offence(node, lines[node.lineno - 1]))
        for node in _function_imports(ast.parse(source))
    ]
    assert [(line, why is None) for line, why in verdicts] == [
        (3, True),
        (4, False),
        (5, True),
        (7, False),
        (10, False),
    ]
