"""Benchmark: `trainwiz diagnose` on a large synthetic log vs `grep -E -c` with the same signatures.

Generates a log of SIZE (default 1 GiB) in a temp dir: benign training output (loss dicts, tqdm
redraws joined by \\r, NCCL INFO, FutureWarnings, rank-prefixed warnings) with a few real
failures spread through it. Runs, interleaved ``--repeats`` times (medians reported, so load
from other jobs hits every tool alike), `python -m tui.cli diagnose --json` (peak RSS read from
wait4), `grep -E -c -f <patterns>` where the patterns are the classifier's own signatures
translated to POSIX ERE, and `grep -F -c -f <keys>` with the prefilter's literal scan keys (the
floor: no classification at all). ``--compare-with CHECKOUT`` also times another checkout's
`diagnose` (e.g. the previous version) on the same file and compares the findings.

    .venv/bin/python benchmarks/diagnose_bench.py --size-mb 256 --repeats 5 --compare-with /work/main

On a GPU machine, ``--provoke-gpu DIR`` instead makes real GPU failures (a CUDA OOM, a 2-rank
run where rank 1 runs out of memory while rank 0 waits in a collective, and a 2-rank NCCL
watchdog timeout), writes each log to DIR and, where backend.diagnosis imports, its findings to
DIR/provoked.json (else run `trainwiz diagnose DIR/<name>.log` on the fetched logs).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
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
    # look-alikes of the newer signatures: a free-form loss line, PEFT's parameter count
    # (NCCL's start-up fallback WARN is left out: printed once per rank, not every 10 lines)
    "Epoch 1, Step 312, Loss: 0.9670:  31%|███       | 312/1000 [07:01<15:32,  1.36s/it]\n",
    "trainable params: 4194304 || all params: 6742609920 || trainable%: 0.0622\n",
]
FAILURES = [
    "WARNING: tokenization mismatch: 903 vs. 902. #turn = 3. (ignored)\n",
    "[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.10 GiB of which 1.2 GiB is free.\n",
    "node1:97:183 [0] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device\n",
    "OSError: [Errno 28] No space left on device: '/data/output/checkpoint-1200'\n",
    "RuntimeError: The server socket has failed to listen on any local network\naddress. (errno: 98 - "
    "Address\nalready in use).\n",
    "slurmstepd: error: *** STEP 77.0 ON gpu-b CANCELLED AT 2026-12-01T13:00:00 DUE TO TIME LIMIT ***\n",
    "[E1201 13:00:00.1 socket.cpp:957] [c10d] The client socket has timed out after 900s while trying "
    "to connect to (10.0.0.1, 29500).\n",
    "gpu-b:11:22 [3] transport/net_ib.cc:1700 NCCL WARN NET/IB : Got completion from peer "
    "10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)\n",
]


def to_ere(pattern: str) -> str:
    """Python regex -> POSIX ERE for GNU grep (no lookaround, no lazy, no named groups)."""
    out = re.sub(r"\(\?i\)|\(\?i:", lambda m: "" if m.group() == "(?i)" else "(", pattern)
    out = re.sub(r"\(\?P<\w+>", "(", out)
    out = out.replace("(?:", "(")
    out = re.sub(r"\(\?![^)]*\)\]?\)?", "", out)  # drop negative lookahead
    out = out.replace("\\d", "[0-9]").replace("\\s", "[[:space:]]").replace("\\S", "[^[:space:]]")
    out = re.sub(r"(\}|\*|\+)\?", r"\1", out)  # lazy -> greedy
    return out


def _varied(rng: random.Random) -> str:
    """One healthy line with its own numbers (steps, losses, ranks, timestamps, hosts), as a
    real run prints them: a log whose lines repeat only in shape."""
    step, total = rng.randint(1, 99999), rng.randint(100000, 999999)
    cells = rng.randint(0, 10)
    bar = "█" * cells + rng.choice(" ▏▎▍▌▋▊▉") * (cells < 10) + " " * max(0, 9 - cells)
    line = rng.choice(BENIGN)
    forms = [
        f"{{'loss': {rng.uniform(0, 3):.4f}, 'grad_norm': {rng.uniform(0, 9):.3f}, "
        f"'learning_rate': {rng.uniform(0, 1e-4):.16e}, 'epoch': {rng.uniform(0, 3):.2f}}}\n",
        f" {cells * 10}%|{bar}| {step}/{total} [{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        f"<{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d},  {rng.uniform(0.5, 9):.2f}s/it]\r"
        f" {cells * 10}%|{bar}| {step + 1}/{total} [00:02<01:09,  1.33s/it]\n",
        f"gpu-{rng.choice('abcdefgh')}{rng.randint(1, 64)}:{rng.randint(100, 99999)}:"
        f"{rng.randint(100, 99999)} [{rng.randint(0, 7)}] NCCL INFO Channel {rng.randint(0, 31):02d}"
        f"/{rng.choice((2, 4, 32))} :    0   1   2   3\n",
        f"[rank{rng.randint(0, 63)}]:[W{rng.randint(1000, 1231)} {rng.randint(0, 23):02d}:"
        f"{rng.randint(0, 59):02d}:{rng.uniform(0, 59):012.9f} ProcessGroupNCCL.cpp:1575] Warning: "
        "WARNING: destroy_process_group() was not called before program exit.\n",
        f"[2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
        f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d},{rng.randint(0, 999):03d}] [INFO] "
        f"[logging.py:96:log_dist] [Rank {rng.randint(0, 7)}] step={step}, skipped=0, "
        f"lr=[{rng.uniform(0, 1e-4):.16e}], mom=[(0.9, 0.95)]\n",
        f"Epoch {rng.randint(1, 9)}, Step {step}, Loss: {rng.uniform(0, 3):.4f}:  {cells * 10}%|"
        f"{bar}| {step}/{total} [07:01<15:32,  {rng.uniform(0.5, 9):.2f}s/it]\n",
    ]
    return rng.choice([line, *forms])


def generate(path: Path, size: int, varied: bool = False) -> int:
    """The benchmark log. ``varied``: every healthy line drawn with its own numbers from a pool
    of 200,000, shuffled (no two blocks alike); else one 20,000-line block repeated."""
    if varied:
        rng = random.Random(20261201)
        pool = [_varied(rng) for _ in range(200_000)]
        return _generate_varied(path, size, pool, rng)
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


def _generate_varied(path: Path, size: int, pool: list[str], rng: random.Random) -> int:
    failures = written = index = 0
    every = max(1, size // (20_000 * 90) // 20)  # ~20 failures, as in the repeated log
    with path.open("w", encoding="utf-8") as handle:
        while written < size:
            block = "".join(rng.choices(pool, k=20_000))
            handle.write(block)
            written += len(block.encode())
            if index % every == 0:
                handle.write(FAILURES[failures % len(FAILURES)])
                failures += 1
            index += 1
    return failures


def timed(
    argv: list[str], env: dict[str, str] | None = None, cwd: Path = REPO
) -> tuple[float, float, int, str]:
    """(wall seconds, CPU seconds, peak RSS in MiB, stdout) of one child process. CPU time is
    reported too because wall time on a shared, loaded machine says little."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=cwd, env=env
    )
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


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 2)


def _measure(argv: list[str], runs: dict[str, list[tuple[float, float, int, str]]], name: str,
             env: dict[str, str] | None = None, cwd: Path = REPO) -> None:  # fmt: skip
    runs.setdefault(name, []).append(timed(argv, env, cwd))
    LOADS.setdefault(name, []).append(round(os.getloadavg()[0], 2))  # the load it ran under


LOADS: dict[str, list[float]] = {}
# The scan without the line shapes (the prefilter over every byte), findings as JSON: what
# the shapes save, measured on the same file.
_DIRECT = (
    "import json, sys; from backend.diagnosis.classifier import diagnose_stream;"
    "d = diagnose_stream(open(sys.argv[1], 'rb'), mode='direct');"
    "print(json.dumps({'findings': [{'category': f.category, 'count': f.count} for f in d.findings]}))"
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; medians kept")
    parser.add_argument(
        "--compare-with",
        type=Path,
        default=None,
        metavar="CHECKOUT",
        help="also time `diagnose` from another checkout (e.g. main) on the same file",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--varied", action="store_true", help="healthy lines with their own numbers, shuffled"
    )
    parser.add_argument("--log", type=Path, default=None, help="keep the log here (reused)")
    parser.add_argument("--no-direct", action="store_true", help="skip the previous (direct) scan")
    parser.add_argument("--provoke-gpu", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    if args.provoke_gpu is not None:
        return provoke_gpu(args.provoke_gpu)
    with tempfile.TemporaryDirectory(prefix="trainwiz-bench-") as tmp:
        log = args.log or Path(tmp) / "train.log"
        t0 = time.perf_counter()
        inserted = -1  # a kept log is reused as it is
        if not log.exists():
            inserted = generate(log, args.size_mb << 20, args.varied)
        gen_s = time.perf_counter() - t0
        from backend.diagnosis.classifier import _KEYS  # here: --provoke-gpu needs none
        from backend.diagnosis.signatures import SIGNATURES

        patterns = Path(tmp) / "signatures.ere"
        patterns.write_text("\n".join(to_ere(s.pattern.pattern) for s in SIGNATURES) + "\n")
        keys = Path(tmp) / "keys.txt"
        keys.write_text("\n".join(_KEYS) + "\n")
        size = log.stat().st_size
        subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm page cache
        diagnose = [sys.executable, "-m", "tui.cli", "diagnose", str(log), "--json"]
        other_patterns = Path(tmp) / "signatures-other.ere"
        if args.compare_with is not None:  # the other checkout's signatures, translated alike
            code = (
                "import sys; sys.path.insert(0, sys.argv[1]); sys.path.insert(1, sys.argv[2]);"
                "from diagnose_bench import to_ere;"
                "from backend.diagnosis.signatures import SIGNATURES;"
                "print('\\n'.join(to_ere(s.pattern.pattern) for s in SIGNATURES))"
            )
            other_patterns.write_text(
                subprocess.run(
                    [sys.executable, "-c", code, str(args.compare_with), str(REPO / "benchmarks")],
                    capture_output=True, text=True, check=True,
                    env={**os.environ, "PYTHONPATH": str(args.compare_with)},
                ).stdout
            )  # fmt: skip
        runs: dict[str, list[tuple[float, float, int, str]]] = {}
        for _ in range(args.repeats):  # interleaved, so load changes hit every tool alike
            _measure(diagnose, runs, "diagnose")
            # one process (no split into parallel parts): the CPU-for-CPU comparison
            _measure(diagnose, runs, "diagnose_1job", {**os.environ, "TRAINWIZ_DIAGNOSE_JOBS": "1"})
            if not args.no_direct:
                _measure([sys.executable, "-c", _DIRECT, str(log)], runs, "diagnose_direct_1job")
            _measure(["grep", "-E", "-c", "-f", str(patterns), str(log)], runs, "grep_E")
            _measure(["grep", "-F", "-c", "-f", str(keys), str(log)], runs, "grep_F_keys")
            c_locale = {**os.environ, "LC_ALL": "C"}  # grep's fastest mode: bytes, no UTF-8
            _measure(
                ["grep", "-E", "-c", "-f", str(patterns), str(log)], runs, "grep_E_C", c_locale
            )
            if args.compare_with is not None:
                other = {**os.environ, "PYTHONPATH": str(args.compare_with)}
                # cwd too: `python -m` puts the working directory first on sys.path
                _measure(diagnose, runs, "diagnose_other", other, args.compare_with)
                _measure(
                    ["grep", "-E", "-c", "-f", str(other_patterns), str(log)], runs, "grep_E_other"
                )
        findings = json.loads(runs["diagnose"][-1][3])["findings"]
        result: dict[str, object] = {
            "size_mib": round(size / 2**20, 1),
            "failures_inserted": inserted,
            "generate_s": round(gen_s, 2),
            "repeats": args.repeats,
        }
        for name, samples in runs.items():
            result[f"{name}_s"] = _median([x[0] for x in samples])
            result[f"{name}_cpu_s"] = _median([x[1] for x in samples])
            result[f"{name}_peak_rss_mib"] = max(x[2] for x in samples)
            result[f"{name}_all_s"] = [round(x[0], 2) for x in samples]
            result[f"{name}_all_cpu_s"] = [round(x[1], 2) for x in samples]
            result[f"{name}_loadavg"] = LOADS[name]
        result["grep_matching_lines"] = int(runs["grep_E"][-1][3].strip() or 0)
        names = ("grep_E", "grep_E_C", "grep_F_keys", "grep_E_other")
        for name in [n for n in names if n in runs]:  # the single-process scan against each
            result[f"ratio_wall_1job_over_{name}"] = round(
                float(result["diagnose_1job_s"]) / float(result[f"{name}_s"]),
                2,  # type: ignore[arg-type]
            )
            result[f"ratio_cpu_1job_over_{name}"] = round(
                float(result["diagnose_1job_cpu_s"]) / float(result[f"{name}_cpu_s"]),
                2,  # type: ignore[arg-type]
            )
        for name in [n for n in names if n in runs]:
            result[f"ratio_wall_diagnose_over_{name}"] = round(
                float(result["diagnose_s"]) / float(result[f"{name}_s"]),
                2,  # type: ignore[arg-type]
            )
            result[f"ratio_cpu_diagnose_over_{name}"] = round(
                float(result["diagnose_cpu_s"]) / float(result[f"{name}_cpu_s"]),
                2,  # type: ignore[arg-type]
            )
        result["diagnose_mib_per_cpu_s"] = round(size / 2**20 / float(result["diagnose_cpu_s"]), 1)  # type: ignore[arg-type]
        result["findings"] = {f["category"]: f["count"] for f in findings}
        if "diagnose_direct_1job" in runs:
            direct = json.loads(runs["diagnose_direct_1job"][-1][3])["findings"]
            found = {f["category"]: f["count"] for f in direct}
            result["same_findings_direct"] = found == result["findings"]
        result["varied"] = args.varied
        if "diagnose_other" in runs:
            other_findings = json.loads(runs["diagnose_other"][-1][3])["findings"]
            result["findings_other"] = {f["category"]: f["count"] for f in other_findings}
            result["same_findings"] = result["findings_other"] == result["findings"]
        result["locale"] = os.environ.get("LC_ALL") or os.environ.get("LANG") or "unset"
        result["loadavg_at_end"] = round(os.getloadavg()[0], 2)
        result["cpus"] = os.cpu_count()
        result["python"] = sys.version.split()[0]
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
