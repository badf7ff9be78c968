"""Benchmark: `trainwiz diagnose` on a large synthetic log vs `grep -E -c` with the same signatures.

Generates a log of SIZE (default 1 GiB) in a temp dir: benign training output (loss dicts, tqdm
redraws joined by \\r, NCCL INFO, FutureWarnings, rank-prefixed warnings) with a few real
failures spread through it. Runs `python -m tui.cli diagnose --json` (peak RSS read from
wait4) and `grep -E -c -f <patterns>` where the patterns are the classifier's own signatures
translated to POSIX ERE. Prints and writes JSON results.

    .venv/bin/python benchmarks/diagnose_bench.py --size-mb 1024 --out docs/diagnose_bench.json

On a GPU machine, ``--provoke-gpu DIR`` instead makes real GPU failures (a CUDA OOM, a 2-rank
run where rank 1 runs out of memory while rank 0 waits in a collective, and a 2-rank NCCL
watchdog timeout), writes each log to DIR and, where backend.diagnosis imports, its findings to
DIR/provoked.json (else run `trainwiz diagnose DIR/<name>.log` on the fetched logs).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


BENIGN = [
    "{'loss': 1.3491, 'grad_norm': 0.83, 'learning_rate': 1.2045437948275952e-05, 'epoch': 0.98}\n",
    " 45%|████▌     | 450/1000 [10:01<12:13,  1.33s/it]\r 45%|████▌     | 451/1000 [10:02<12:12,  1.33s/it]\n",
    "node1:97:183 [0] NCCL INFO Channel 00/02 :    0   1   2   3\n",
    "/opt/conda/lib/python3.10/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py:689: "
    "FutureWarning: FSDP.state_dict_type() and FSDP.set_state_dict_type() are being deprecated.\n",
    "  warnings.warn(\n",
    "[rank0]:[W1130 03:32:28.242422870 ProcessGroupNCCL.cpp:1575] Warning: WARNING: destroy_process_group() "
    "was not called before program exit, which can leak resources.\n",
    "[2024-06-26 19:51:15,295] [INFO] [comm.py:668:init_distributed] Initializing TorchBackend with backend nccl\n",
    "Some weights of LlamaForCausalLM were not initialized from the model checkpoint and are newly initialized\n",
]
FAILURES = [
    "WARNING: tokenization mismatch: 903 vs. 902. #turn = 3. (ignored)\n",
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.10 GiB of which 1.2 GiB is free.\n",
    "node1:97:183 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n",
    "OSError: [Errno 28] No space left on device: '/data/output/checkpoint-1200'\n",
    "RuntimeError: The server socket has failed to listen on any local network\naddress. (errno: 98 - "
    "Address\nalready in use).\n",
]


def to_ere(pattern: str) -> str:
    """Python regex -> POSIX ERE for GNU grep (no lookaround, no lazy, no named groups)."""
    out = pattern.replace("(?i)", "")
    out = re.sub(r"\(\?P<\w+>", "(", out)
    out = out.replace("(?:", "(")
    out = re.sub(r"\(\?![^)]*\)\]?\)?", "", out)  # drop negative lookahead
    out = out.replace("\\d", "[0-9]").replace("\\s", "[[:space:]]").replace("\\S", "[^[:space:]]")
    out = re.sub(r"(\}|\*|\+)\?", r"\1", out)  # lazy -> greedy
    return out


def generate(path: Path, size: int) -> int:
    block = "".join(BENIGN * 2000)
    failures = 0
    written = 0
    every = max(1, size // len(block) // 20)
    with path.open("w", encoding="utf-8") as handle:
        index = 0
        while written < size:
            handle.write(block)
            written += len(block.encode())
            if index % every == 0:
                handle.write(FAILURES[failures % len(FAILURES)])
                failures += 1
            index += 1
    return failures


def timed(argv: list[str]) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, peak RSS in MiB, stdout) of one child process. CPU time is
    reported too because wall time on a shared, loaded machine says little."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    cpu = usage.ru_utime + usage.ru_stime
    return time.perf_counter() - start, cpu, usage.ru_maxrss // 1024, out


_OOM_ONE = """
import torch
hold = []
while True:
    hold.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
"""
_OOM_RANK1 = """
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank = dist.get_rank()
torch.cuda.set_device(rank)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
hold = []
if rank == 1:
    while True:
        hold.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
dist.all_reduce(x)
"""
_TIMEOUT = """
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
torch.cuda.set_device(rank)
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
if rank == 1:
    time.sleep(120)
dist.all_reduce(x)
torch.cuda.synchronize()
"""
_EXPECTED = {
    "cuda_oom": {"cuda_oom"},
    "oom_rank1_of_2": {"cuda_oom"},
    "nccl_timeout": {"nccl"},
}


def provoke_gpu(out: Path) -> int:
    """Real failures on real GPUs; every log is kept whatever diagnosis says."""
    out.mkdir(parents=True, exist_ok=True)
    python = os.environ.get("PYTHON", sys.executable)
    cases = {
        "cuda_oom": (_OOM_ONE, [python]),
        "oom_rank1_of_2": (
            _OOM_RANK1,
            [python, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
        ),
        "nccl_timeout": (
            _TIMEOUT,
            [python, "-m", "torch.distributed.run", "--nproc_per_node", "2"],
        ),
    }
    report: dict[str, object] = {}
    for name, (code, launcher) in cases.items():
        script = out / f"{name}.py"
        script.write_text(code)
        log = out / f"{name}.log"
        with log.open("wb") as handle:
            proc = subprocess.run([*launcher, str(script)], stdout=handle, stderr=subprocess.STDOUT,
                                  timeout=300, check=False)  # fmt: skip
        report[name] = {"returncode": proc.returncode, "log_bytes": log.stat().st_size}
    try:
        from backend.diagnosis import diagnose_file
    except ImportError as exc:  # e.g. no pydantic on the GPU box: diagnose the logs elsewhere
        report["diagnosis"] = f"not run here: {exc}"
    else:
        for name in cases:
            findings = diagnose_file(out / f"{name}.log").findings
            entry = report[name]
            assert isinstance(entry, dict)
            entry["top"] = findings[0].category if findings else None
            entry["accepted"] = bool(findings) and findings[0].category in _EXPECTED[name]
            entry["findings"] = [(f.category, f.severity, f.line, f.text[:160]) for f in findings]
    (out / "provoked.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--provoke-gpu", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    if args.provoke_gpu is not None:
        return provoke_gpu(args.provoke_gpu)
    with tempfile.TemporaryDirectory(prefix="trainwiz-bench-") as tmp:
        log = Path(tmp) / "train.log"
        t0 = time.perf_counter()
        inserted = generate(log, args.size_mb << 20)
        gen_s = time.perf_counter() - t0
        from backend.diagnosis.signatures import SIGNATURES  # here: --provoke-gpu needs none

        patterns = Path(tmp) / "signatures.ere"
        patterns.write_text("\n".join(to_ere(s.pattern.pattern) for s in SIGNATURES) + "\n")
        size = log.stat().st_size
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm page cache
        d_s, d_cpu, d_rss, d_out = timed(
            [sys.executable, "-m", "tui.cli", "diagnose", str(log), "--json"]
        )
        g_s, g_cpu, g_rss, g_out = timed(["grep", "-E", "-c", "-f", str(patterns), str(log)])
        findings = json.loads(d_out)["findings"]
        result = {
            "size_mib": round(size / 2**20, 1),
            "failures_inserted": inserted,
            "generate_s": round(gen_s, 2),
            "diagnose_s": round(d_s, 2),
            "diagnose_cpu_s": round(d_cpu, 2),
            "diagnose_mib_per_cpu_s": round(size / 2**20 / d_cpu, 1),
            "diagnose_peak_rss_mib": d_rss,
            "grep_s": round(g_s, 2),
            "grep_cpu_s": round(g_cpu, 2),
            "grep_peak_rss_mib": g_rss,
            "grep_matching_lines": int(g_out.strip() or 0),
            "ratio_wall_diagnose_over_grep": round(d_s / g_s, 2),
            "ratio_cpu_diagnose_over_grep": round(d_cpu / g_cpu, 2),
            "loadavg_at_end": os.getloadavg()[0],
            "findings": {f["category"]: f["count"] for f in findings},
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
