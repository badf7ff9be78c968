#!/usr/bin/env bash
# The queue's GPU start rule on a real GPU, read through NVML, driven by the product's CLI only:
#   1. a process that is not trainwiz's holds GPU 0 (a torch tensor of HOG_GIB): a queued CUDA
#      item waits, and `trainwiz queue --json` says why (the pid on the GPU, or the memory);
#   2. the holder ends: the item starts on GPU 0 by itself (no command given);
#   3. two more items without --share: never both on GPU 0 at once (the second waits for "GPU 0
#      runs another queue item"), then it starts; all three finish.
# Every `queue --json` answer is kept in $R/queue-*.json, the scheduler's log in $R/queue.log, and
# a sampler writes NVML's compute processes every 0.5 s to $R/nvml.jsonl (the overlap check).
# Usage on the device machine, from the repo root: bash benchmarks/device/queue_gpu.sh
set -uo pipefail
rm -rf /tmp/queue-gpu /tmp/tw-queue-gpu
export TRAINWIZ_HOME=/tmp/tw-queue-gpu
. "$(dirname "$0")/common.sh" /tmp/queue-gpu "${BUDGET:-420}"
HOG_GIB=${HOG_GIB:-40}
tw() { timeout 120 python3 -m tui.cli "$@"; }
snap() { tw queue --json > "$R/queue-$1.json" 2>> "$R/queue.err"; python3 - "$R/queue-$1.json" "$1" <<'PY' | tee -a "$R/timeline.txt"
import json, sys
try:
    items = json.load(open(sys.argv[1]))
except Exception as exc:
    print(f"{sys.argv[2]}: no answer ({type(exc).__name__})"); sys.exit(0)
items = items.get("items", items) if isinstance(items, dict) else items
for i in items:
    print(f"{sys.argv[2]}: item {i.get('id')} {i.get('state')} gpus={i.get('assigned')} "
          f"run={i.get('run_id')} msg={i.get('message')!r}")
PY
}
state_of() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d=d.get('items',d) if isinstance(d,dict) else d; print([i['state'] for i in d if i['id']==int(sys.argv[2])][0])" "$R/queue-$1.json" "$2" 2>/dev/null; }

for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
stamp "gpu $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
python3 -c "import pynvml, torch; print('pynvml ok; torch', torch.__version__)" 2>&1 | tee -a "$R/timeline.txt"
python3 - "$R/nvml.jsonl" <<'PY' &
import json, sys, time
import pynvml
pynvml.nvmlInit()
handle = pynvml.nvmlDeviceGetHandleByIndex(0)
with open(sys.argv[1], "a") as out:
    while True:
        procs = [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        out.write(json.dumps({"t": time.time(), "pids": procs, "used": used}) + "\n"); out.flush()
        time.sleep(0.5)
PY
SAMPLER=$!

python3 - "$R/tiny-gpu.yaml" <<'PY'
import sys

import yaml

preset = yaml.safe_load(open("presets/tiny-cpu.yaml"))
preset["name"] = "tiny-gpu"
preset.pop("environment", None)
preset["launch"].update(device="cuda", nproc_per_node=1)
preset["launch"].pop("master_port", None)
preset["training"].update(max_steps=300, bf16=True)  # ~a minute on the GPU: long enough to overlap
yaml.safe_dump(preset, open(sys.argv[1], "w"), sort_keys=False)
PY
tw model fetch "$R/tiny-gpu.yaml" > "$R/model.txt" 2>&1; tail -n 1 "$R/model.txt" | tee -a "$R/timeline.txt"

stamp "1. a foreign process holds ${HOG_GIB} GiB of GPU 0"
python3 -c "
import sys, time, torch
x = torch.empty(int(${HOG_GIB}) << 30, dtype=torch.uint8, device='cuda')
print('hog ready', flush=True)
time.sleep(600)" > "$R/hog.txt" 2>&1 &
HOG=$!
for _ in $(seq 1 120); do grep -q "hog ready" "$R/hog.txt" && break; sleep 0.5; done
stamp "hog pid $HOG: $(cat "$R/hog.txt")"
tw queue add "$R/tiny-gpu.yaml" --json > "$R/add1.json" 2>&1; cat "$R/add1.json" | tee -a "$R/timeline.txt"
for _ in $(seq 1 30); do snap wait1; grep -q "busy\|GiB" "$R/queue-wait1.json" && break; sleep 1; done
cp "$R/queue.err" "$R/queue.err.1" 2>/dev/null
stamp "2. the holder ends"
kill "$HOG"; wait "$HOG" 2>/dev/null
for _ in $(seq 1 60); do snap start1; [ "$(state_of start1 1)" != queued ] && break; sleep 1; done

stamp "3. two more items without --share"
tw queue add "$R/tiny-gpu.yaml" --json > "$R/add2.json" 2>&1
tw queue add "$R/tiny-gpu.yaml" --json > "$R/add3.json" 2>&1
for _ in $(seq 1 240); do
  snap loop > /dev/null
  done_all=$(python3 -c "import json; d=json.load(open('$R/queue-loop.json')); d=d.get('items',d) if isinstance(d,dict) else d; print(all(i['state'] in ('finished','failed','stopped') for i in d))" 2>/dev/null)
  cp "$R/queue-loop.json" "$R/queue-t$(date +%s).json"
  [ "$done_all" = True ] && break
  sleep 1
done
snap final
kill "$SAMPLER" 2>/dev/null
cp "$TRAINWIZ_HOME/queue.log" "$R/queue.log" 2>/dev/null
python3 - "$R" <<'PY' | tee -a "$R/timeline.txt"
import glob, json, sys
R = sys.argv[1]
final = json.load(open(f"{R}/queue-final.json"))
items = final.get("items", final) if isinstance(final, dict) else final
print("states:", {i["id"]: i["state"] for i in items})
waits = set()
for path in sorted(glob.glob(f"{R}/queue-*.json")):
    try:
        data = json.load(open(path))
    except Exception:
        continue
    data = data.get("items", data) if isinstance(data, dict) else data
    for i in data:
        if i["state"] == "queued" and i.get("message"):
            waits.add(i["message"])
    running = [i["id"] for i in data if i["state"] in ("starting", "running")]
    if len(running) > 1:
        print("OVERLAP in", path, running)
print("reasons seen while waiting:", sorted(waits))
samples = [json.loads(l) for l in open(f"{R}/nvml.jsonl")]
print("nvml samples", len(samples), "max processes at once on GPU 0:",
      max(len(s["pids"]) for s in samples))
PY
stamp "done"
cp -r "$R" "${OUT:-/tmp}/" 2>/dev/null
