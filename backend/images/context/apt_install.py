"""Install the apt packages named on the command line that the image lacks (no-op when all present).

Runs inside the image being built; arguments arrive as argv, never through a shell string.
"""

import os
import shutil
import subprocess
import sys


def main(packages: list[str]) -> int:
    missing = [
        p
        for p in packages
        if subprocess.run(
            ["dpkg", "-s", p], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
    ]
    if not missing:
        print("trainwiz: apt packages present:", " ".join(packages) or "(none)", flush=True)
        return 0
    if shutil.which("apt-get") is None:
        print("trainwiz: no apt-get in this image; cannot install:", " ".join(missing), flush=True)
        return 1
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update"], check=True, env=env)
    subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *missing], check=True, env=env
    )
    shutil.rmtree("/var/lib/apt/lists", ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
