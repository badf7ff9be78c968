"""The seed's fix for OOM while saving an FSDP full state dict on torch 2.0.x.

torch 2.0's FSDP clones each full parameter on the GPU before offloading; the seed edits
torch/distributed/fsdp/_state_dict_utils.py to clone on the CPU instead. Applied only when the
installed torch is 2.0.x; any other torch is left untouched (later releases fixed it upstream).
"""

import sys
from importlib import metadata
from pathlib import Path

OLD = "state_dict[fqn] = state_dict[fqn].clone().detach()"
NEW = "state_dict[fqn] = state_dict[fqn].cpu().clone().detach()"


def main() -> int:
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        print("trainwiz: FSDP patch skipped: no torch", flush=True)
        return 0
    if not version.startswith("2.0."):
        print(f"trainwiz: FSDP patch skipped: torch {version} is not 2.0.x", flush=True)
        return 0
    import torch.distributed.fsdp as fsdp

    root = Path(fsdp.__file__).parent
    patched = 0
    for name in ("_state_dict_utils.py", "fully_sharded_data_parallel.py"):
        path = root / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        if OLD in text:
            path.write_text(text.replace(OLD, NEW), encoding="utf-8")
            patched += text.count(OLD)
            print(f"trainwiz: FSDP patch applied to {path}", flush=True)
    if patched == 0:
        print(f"trainwiz: FSDP patch: '{OLD}' not found under {root}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
