"""The entry's fsdp_config file lives in the run dir and is gone when the trainer exits: no
/tmp/tmp*.json is left behind by any run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.entry import ENTRY_SOURCE

SCRIPT = """
import importlib.util, json, os, sys
sys.path.insert(0, os.path.dirname(sys.argv[1]))
spec = importlib.util.spec_from_file_location("tw_entry", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
argv = ["--fsdp_config", json.dumps({"transformer_layer_cls_to_wrap": ["LlamaDecoderLayer"]})]
module.adapt_argv(argv)
print(argv[1])
print(os.path.exists(argv[1]))
"""


@pytest.mark.slow
def test_the_fsdp_config_file_is_in_the_run_dir_and_removed_at_exit(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ENTRY_SOURCE)],
        env={**os.environ, "TRAINWIZ_RUN_DIR": str(tmp_path)},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    path, existed = done.stdout.split()[-2:]
    assert Path(path).parent == tmp_path and existed == "True"
    assert not Path(path).exists()
