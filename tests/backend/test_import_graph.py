"""The import graph: no cycle among trainwiz's modules (scripts/import_cycles.py), neither of
the imports that run when a module loads nor counting those inside functions (a deferred import
is still a dependency), and the script itself finds one when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import_cycles.py"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_no_module_level_import_cycle() -> None:
    done = _run(ROOT, "--top-level")
    assert done.returncode == 0, done.stdout


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    done = _run(ROOT)
    assert done.returncode == 0, done.stdout


def test_a_cycle_is_found_and_named(tmp_path: Path) -> None:
    pkg = tmp_path / "backend"
    (pkg / "plan").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "plan" / "__init__.py").write_text("")
    (pkg / "plan" / "a.py").write_text("from backend.runs import b\n")
    (pkg / "runs.py").write_text("import backend.plan.a\n")
    (pkg / "b.py").write_text("")
    done = _run(tmp_path, "--top-level")
    assert done.returncode == 1
    assert "2 modules: backend.plan.a, backend.runs" in done.stdout
    # A function-level import is still a dependency (the default graph counts it) ...
    (pkg / "runs.py").write_text("def f():\n    import backend.plan.a\n")
    assert _run(tmp_path, "--top-level").returncode == 0
    assert _run(tmp_path).returncode == 1
    # ... but one under TYPE_CHECKING never runs.
    (pkg / "runs.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import backend.plan.a\n"
    )
    assert _run(tmp_path).returncode == 0
