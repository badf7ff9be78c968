"""Build flash-attn the way the seed learned to: --no-build-isolation, MAX_JOBS sized to RAM.

Skips when the image already imports flash_attn. Usage: flash_attn.py MAX_JOBS PIP_ARG...
"""

import os
import subprocess
import sys


def main(max_jobs: str, pip_args: list[str]) -> int:
    probe = subprocess.run([sys.executable, "-c", "import flash_attn"], capture_output=True)
    if probe.returncode == 0:
        print("trainwiz: flash-attn already in the image, not rebuilt", flush=True)
        return 0
    base = [sys.executable, "-m", "pip", "install"]
    subprocess.run([*base, *pip_args, "ninja", "packaging", "psutil", "wheel"], check=True)
    env = dict(os.environ, MAX_JOBS=max_jobs)
    print(f"trainwiz: building flash-attn with MAX_JOBS={max_jobs}", flush=True)
    return subprocess.run(
        [*base, "--no-build-isolation", *pip_args, "flash-attn"], env=env
    ).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
