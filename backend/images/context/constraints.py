"""Pin the torch already in the image, so later pip installs never swap it for another build.

Without this, a package requiring a newer torch makes pip download a multi-GB CUDA wheel over the
image's own (NVIDIA's or the CPU one). Writes an empty file when the image has no torch.
"""

import sys
from importlib import metadata


def main(path: str) -> int:
    try:
        line = f"torch=={metadata.version('torch')}\n"
    except metadata.PackageNotFoundError:
        line = ""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(line)
    print("trainwiz: constraints:", line.strip() or "(no torch in the image)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
