"""A failed image build is explained one layer above the builder: the classifier's finding and
the line it points at come back on the result, read from the build's own log file."""

from __future__ import annotations

from pathlib import Path

from backend.diagnosis.build_log import explain_build
from backend.images.build import BuildResult

# The shape of the seed's flash-attn build failure on an image without nvcc.
LOG = """Step 7/9 : RUN python3 /opt/trainwiz/flash_attn.py
building flash-attn with MAX_JOBS=2
    OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.
    error: subprocess-exited-with-error
The command '/bin/sh -c python3 /opt/trainwiz/flash_attn.py' returned a non-zero code: 1
"""


def _failed(tmp_path: Path, text: str) -> BuildResult:
    log = tmp_path / "build.log"
    log.write_text(text)
    return BuildResult("trainwiz-env:x", False, False, "FROM x", str(log), error="build failed")


def test_a_failed_build_gets_the_classifiers_finding_and_its_line(tmp_path: Path) -> None:
    result = explain_build(_failed(tmp_path, LOG))
    assert result.findings, "the flash-attn build failure is a known one"
    top = result.findings[0]
    assert top.category == "flash_attn_build"
    assert result.error_line_no == top.line
    assert result.error_line == LOG.splitlines()[top.line - 1].strip()


def test_a_build_that_worked_or_lost_its_log_is_left_as_it_is(tmp_path: Path) -> None:
    ok = BuildResult("trainwiz-env:x", True, False, "FROM x")
    assert explain_build(ok).findings == []
    gone = _failed(tmp_path, LOG)
    Path(gone.log_path or "").unlink()
    gone.error_line = "kept"
    assert explain_build(gone).findings == [] and gone.error_line == "kept"
