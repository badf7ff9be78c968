"""The printed plan of every shipped preset, run as a script, runs what a launch runs.

Each command the script calls is a stub on PATH (or, for the binaries the spec resolves to an
absolute path, at that path) that records its argv and the environment the step sets. The
recorded sequence must be the launch spec's own command sequence (``LaunchSpec.commands``),
with every prepare step included, in the same order and with the same environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.preset import load_preset
from backend.preset.loader import SHIPPED_DIR, parse_preset_text
from backend.runs.spec import build_spec

SHIPPED = sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml") if p.stem != "images")
STUB = """#!{python}
import json, os, sys
keys = [k for k in os.environ.get("STUB_KEYS", "").split(",") if k]
record = {{"argv": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
          "env": {{k: os.environ[k] for k in keys if k in os.environ}}}}
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(record) + "\\n")
"""


def _stubs(folder: Path, names: set[str]) -> Path:
    folder.mkdir()
    for name in names:
        path = folder / name
        path.write_text(STUB.format(python=sys.executable))
        path.chmod(0o755)
    return folder


def test_every_shipped_preset_is_checked() -> None:
    assert {"tiny-cpu", "vicuna-13b-v1.3-8xa100", "vicuna-7b-4xa100-40g"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_the_printed_plan_runs_what_the_launch_runs(name: str, tmp_path: Path) -> None:
    stubs = _stubs(tmp_path / "bin", {"trainwiz", "torchrun", "docker", "git"})
    spec = build_spec(
        load_preset(name),
        prepare="all",
        trainwiz=(str(stubs / "trainwiz"),),
        torchrun=str(stubs / "torchrun"),
    )
    script = spec.plan.as_script()
    steps = [*spec.prepare, *([spec.train] if spec.train else [])]
    keys = sorted({k for s in steps for k in s.env})
    log = tmp_path / "calls.jsonl"
    done = subprocess.run(
        ["/bin/bash", "-c", script],
        cwd=tmp_path,
        env={
            "PATH": f"{stubs}:/usr/bin:/bin",
            "STUB_LOG": str(log),
            "STUB_KEYS": ",".join(keys),
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    expected = [[os.path.basename(argv[0]), *argv[1:]] for argv in spec.commands()]
    assert [c["argv"] for c in calls] == expected
    # The environment each host step sets is the one the launch gives it.
    for call, step in zip(calls, steps, strict=False):
        assert call["env"] == {k: v for k, v in step.env.items()}, step.id
    # Every prepare step a launch can run is in the printed plan, in the plan's order.
    assert [s.id for s in spec.prepare] == [
        s.id for s in spec.plan.steps if s.id in ("model", "fastchat", "image", "environment")
    ]


def test_the_seed_plan_clones_fastchat_where_pip_installs_it(tmp_path: Path) -> None:
    spec = build_spec(load_preset("vicuna-13b-v1.3-8xa100"), prepare="all")
    ids = [s.id for s in spec.plan.steps]
    # The seed's order: model, FastChat clone, image pull, docker run, setup, train.
    assert ids.index("model") < ids.index("fastchat") < ids.index("image") < ids.index("container")
    clone = spec.plan.step("fastchat")
    assert clone.argv == [
        "git",
        "clone",
        "--",
        "https://github.com/lm-sys/FastChat.git",
        "/data/FastChat",
    ]
    install = spec.plan.step("setup-fastchat")
    assert install.argv[:3] == ["pip", "install", "-e"]
    # /data is mounted at /app/: the clone on the host is the folder pip runs in.
    assert install.exec_prefix[:4] == ["docker", "exec", "-w", "/app/FastChat"]
    assert all("-it" not in s.exec_prefix and "-t" not in s.exec_prefix for s in spec.plan.steps)
    # The seed's machine setup is listed with why it is a check, not silently dropped.
    checks = " ".join(what for what, _why in spec.plan.checks)
    for seed_step in ("apt-get install cuda", "docker.io", "nvidia-docker2", "git-lfs"):
        assert seed_step in checks
    script = spec.plan.as_script()
    assert "# checked by 'trainwiz check'" in script


def test_printing_a_multi_node_plan_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = yaml.safe_load((SHIPPED_DIR / "tiny-cpu.yaml").read_text())
    data["launch"].update(scheduler="ssh", nnodes=2, nodes=["127.0.0.1", "127.0.0.2"])
    monkeypatch.chdir(tmp_path)
    spec = build_spec(parse_preset_text(yaml.safe_dump(data)), prepare="none")
    assert [s.id for s in spec.plan.steps if s.id.startswith("node")]  # the node steps
    assert spec.plan.step("train").included_in == "node"
    assert list(tmp_path.iterdir()) == []
