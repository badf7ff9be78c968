"""How fast and how small a refusal of a hostile preset is (docs/security.md).

Each case runs `trainwiz plan FILE` in a fresh subprocess and reports the exit code, wall time,
peak RSS of the child (ru_maxrss) and the size of what it printed to stderr.

    .venv/bin/python benchmarks/preset_limits.py
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAD = """schema: 1
name: hostile
model: {source: local, dir: /tmp/m}
training:
  data_path: d.json
  output_dir: out
"""


def cases(folder: Path) -> dict[str, Path]:
    bomb = (
        HEAD
        + "  fsdp_config:\n"
        + '    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    )
    bomb += "".join(
        f"    {c}: &{c} [{','.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")
    )
    files = {
        "baseline (valid preset)": HEAD,
        f"YAML bomb in fsdp_config ({len(bomb)} B)": bomb,
        "1000-deep flow nesting": HEAD + "  fsdp_config: " + "[" * 1000 + "]" * 1000 + "\n",
        "duplicate key + second section": HEAD + "  output_dir: x\ntraining: {}\n",
        "500 unknown keys": HEAD + "".join(f"  unknown_{i}: 1\n" for i in range(500)),
    }
    out = {}
    for index, (label, text) in enumerate(files.items()):
        path = folder / f"case{index}.yaml"
        path.write_text(text)
        out[label] = path
    big = folder / "big.yaml"
    with big.open("w") as handle:
        handle.write(HEAD + "description: '" + "x" * (50 * 1024 * 1024) + "'\n")
    out["50 MB preset"] = big
    utf16 = folder / "utf16.yaml"
    utf16.write_bytes(HEAD.encode("utf-16"))
    out["UTF-16 file"] = utf16
    return out


def main() -> None:
    folder = Path(tempfile.mkdtemp(prefix="twlimits-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINWIZ_HOME": str(folder / "home")}
    sys.path.insert(0, str(ROOT))
    from backend.errors import BadInput
    from backend.preset.loader import load_preset

    print(
        "| case | exit | CLI wall s | load in-process ms | peak RSS MiB (max so far) | stderr bytes |"
    )
    print("|---|---|---|---|---|---|")
    for label, path in cases(folder).items():
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "tui.cli", "plan", str(path)],
            capture_output=True,
            env=env,
            timeout=600,
            check=False,
        )
        wall = time.perf_counter() - start
        peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
        start = time.perf_counter()
        try:
            load_preset(path)
        except BadInput:
            pass
        load_ms = (time.perf_counter() - start) * 1000
        print(
            f"| {label} | {done.returncode} | {wall:.2f} | {load_ms:.1f} | {peak:.0f} "
            f"| {len(done.stderr)} |"
        )


if __name__ == "__main__":
    main()
