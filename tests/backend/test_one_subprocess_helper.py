"""One subprocess helper: every process the wizard side starts goes through ``backend.subproc``
(its own process group, so a cancel or a stop ends what it started; a timeout ends the group;
a missing binary is a result, not a traceback). A direct ``subprocess.run`` / ``Popen`` /
``check_output`` / ``call`` / ``check_call``, an ``os.system`` or ``os.popen`` elsewhere is a
second way to run a process, one that leaves a timed-out probe's children running: this test
parses every module and fails on one, naming its file and line.

Not scanned: ``backend/subproc.py`` (the helper itself), ``backend/entry/`` (the training side,
standard library only in the run dir) and ``backend/images/context/`` (scripts that run inside
an image, standalone)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("backend", "screens", "widgets", "tui")
EXCLUDED = (Path("backend/subproc.py"), Path("backend/entry"), Path("backend/images/context"))
# Calls that must stay, each with why.
ALLOWED: dict[str, str] = {
    # Runs as a script under the training side's python (``python .../worker.py``), like the
    # training entry: only the standard library, torch, transformers and fastchat are importable
    # there, so it cannot import ``backend.subproc``.
    "backend/results/worker.py": "a standalone script of the training side's python",
}
SUBPROCESS_CALLS = {"run", "Popen", "check_output", "call", "check_call", "getoutput",
                    "getstatusoutput"}  # fmt: skip
OS_CALLS = {"system", "popen", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve",
            "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp"}  # fmt: skip
ASYNCIO_CALLS = {"create_subprocess_exec", "create_subprocess_shell"}
MODULE_CALLS = {"subprocess": SUBPROCESS_CALLS, "os": OS_CALLS, "asyncio": ASYNCIO_CALLS,
                "pty": {"spawn"}}  # fmt: skip


def direct_calls(source: str) -> list[tuple[int, str]]:
    """(line, what) for each call that starts a process without ``backend.subproc``: through the
    module (``subprocess.run``, also under an alias) or a name imported from it (``Popen``)."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> module
    names: dict[str, str] = {}  # local name -> "module.function"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULE_CALLS:
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in MODULE_CALLS:
            for alias in node.names:
                if alias.name in MODULE_CALLS[node.module]:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            module = modules.get(func.value.id)
            if module is not None and func.attr in MODULE_CALLS[module]:
                found.append((node.lineno, f"{module}.{func.attr}"))
        elif isinstance(func, ast.Name) and func.id in names:
            found.append((node.lineno, names[func.id]))
    return sorted(found)


def _offenders() -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if any(rel == e or e in rel.parents for e in EXCLUDED):
                continue
            hits = direct_calls(path.read_text(encoding="utf-8"))
            if hits:
                out[str(rel)] = hits
    return out


def test_every_process_is_started_through_the_subprocess_helper() -> None:
    offenders = _offenders()
    for where in ALLOWED:
        assert offenders.pop(where, None), f"{where} no longer runs a process: drop it from ALLOWED"
    assert offenders == {}, (
        "start it with backend.subproc (probe / run / spawn) instead: "
        + "; ".join(
            f"{where}:{line} {what}" for where, hits in offenders.items() for line, what in hits
        )
    )


def test_the_scan_finds_every_form() -> None:
    # The check itself: the module call, an alias, an imported name, os.system; not a string
    # that mentions one, nor a method of another object called ``run``.
    source = (
        "import subprocess, os\n"
        "import subprocess as sp\n"
        "from subprocess import Popen as P, check_output\n"
        "subprocess.run(['true'])\n"
        "sp.call(['true'])\n"
        "P(['true'])\n"
        "check_output(['true'])\n"
        "os.system('true')\n"
        "os.popen('true')\n"
        "x = 'subprocess.run(argv)'\n"
        "runner.run(['true'])\n"
        "subproc.probe(['true'], 3)\n"
    )
    assert direct_calls(source) == [
        (4, "subprocess.run"),
        (5, "subprocess.call"),
        (6, "subprocess.Popen"),
        (7, "subprocess.check_output"),
        (8, "os.system"),
        (9, "os.popen"),
    ]
