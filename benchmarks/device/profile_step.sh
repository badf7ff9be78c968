#!/usr/bin/env bash
# Where a full fine-tune's step goes (docs/performance.md "One step, profiled"). One device call,
# ~5-7 min. Usage (repo root, on the GPU machine, .whl carried):
#   OUT=dir [FIRST=6] [COUNT=3] [STEPS=10] bash benchmarks/device/profile_step.sh [3b|7b]
# perf.sh's path (held-out ShareGPT-shaped data, a random-weight Llama, `trainwiz tune` for
# this GPU, `trainwiz launch` of its pick), with TRAINWIZ_PROFILE_STEPS=FIRST:COUNT in the
# launch's environment: the entry's stepprofile.py profiles those optimizer steps on rank 0 and
# writes profile.json (wall, GPU busy and idle per step, kernel time by kind, top kernels) and
# the Chrome trace into the run dir. In $OUT: perf-<shape>.tar.gz (everything), profile.json,
# the trace when under 15 MB, timeline.txt and tune.txt.
set -uo pipefail
SHAPE=${1:-3b}
export TRAINWIZ_PROFILE_STEPS="${FIRST:-6}:${COUNT:-3}"
STEPS=${STEPS:-10} bash "$(dirname "$0")/perf.sh" "$SHAPE"
prof=$(ls /tmp/perf-$SHAPE/tuned/profile.json 2>/dev/null)
if [ -n "$prof" ]; then
  cp "$prof" "$OUT/profile.json"
  python3 - "$prof" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
if "error" in p:
    print("profile error:", p["error"])
wall = p.get("wall_s") or 0
print(f"profiled steps {p.get('first_step')}+{p.get('count')}: wall {wall:.3f} s, GPU busy {p.get('gpu_busy_s', 0):.3f} s")
for kind, s in (p.get("by_kind_s") or {}).items():
    print(f"  {kind:14s} {s:8.3f} s  {s / wall:6.1%} of wall" if wall else kind)
for k in (p.get("top_kernels") or [])[:10]:
    print(f"  {k['s']:8.3f} s {k['calls']:5d}x {k['kind']:12s} {k['name'][:90]}")
PY
  trace=/tmp/perf-$SHAPE/tuned/profile-trace.json.gz
  [ -f $trace ] && [ $(stat -c %s $trace) -lt 15000000 ] && cp $trace "$OUT/"
else
  echo "no profile.json: see timeline.txt and the run's train.log.tail in perf-$SHAPE.tar.gz"
fi
