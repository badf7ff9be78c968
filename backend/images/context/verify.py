"""Last build step: import what training needs and print the versions (a failed import fails)."""

import importlib
import sys


def main() -> int:
    versions = []
    for name in ("torch", "transformers", "accelerate", "fastchat"):
        module = importlib.import_module(name)
        versions.append(f"{name} {getattr(module, '__version__', '?')}")
    print("trainwiz: environment ready:", ", ".join(versions), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
