"""How long one probing round takes, by candidate set: all answering, a slow mirror among them,
black holes among them, and every candidate black-holed (the round ends at its budget). All
candidates are loopback servers (tests/backend/mirrorservers.py). Markdown table to stdout; the
results are in docs/mirrors.md.

    .venv/bin/python benchmarks/mirrors_probe.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.mirrors.probe import candidate, clear_cache, probe_all
from backend.mirrors.resolve import SETTLE_S
from tests.backend.mirrorservers import BlackHole, Server, build_wheel, index_handler

ROUNDS = 5


def main() -> None:
    wheels = Path(tempfile.mkdtemp(prefix="twmirrors-")) / "wheels"
    build_wheel(wheels)
    good = [Server(index_handler(wheels)) for _ in range(6)]
    slow = Server(index_handler(wheels), delay_s=0.5)
    error = Server(index_handler(wheels), status=503)
    holes = [BlackHole() for _ in range(6)]
    sets = {
        "6 answering": [s.url for s in good],
        "5 answering + 1 slow (0.5 s)": [s.url for s in good[:5]] + [slow.url],
        "3 answering + 1 x 503 + 2 black holes": [s.url for s in good[:3]]
        + [error.url]
        + [h.url for h in holes[:2]],
        "6 black holes": [h.url for h in holes],
    }
    timeout_s, budget_s = 2.0, 4.0
    print(f"timeout {timeout_s} s per candidate, budget {budget_s} s, {ROUNDS} rounds each\n")
    print("| candidates | settle | round wall s (median) | max s | chosen |")
    print("|---|---|---|---|---|")
    good_urls = tuple(s.url for s in good)
    for label, urls in sets.items():
        for settle in (None, SETTLE_S):
            walls, chosen = [], ""
            for _ in range(ROUNDS):
                clear_cache()
                started = time.monotonic()
                cands = [candidate("pypi", u + "/simple") for u in urls]
                report = probe_all(cands, timeout_s, budget_s, settle_s=settle)
                walls.append(time.monotonic() - started)
                ok = sorted((r for r in report.results if r.ok), key=lambda r: r.latency_ms or 0)
                chosen = "none (first listed kept)"
                if ok:
                    chosen = "good" if ok[0].url.startswith(good_urls) else "slow"
            shown = "off" if settle is None else f"{settle} s (trainwiz)"
            median, worst = statistics.median(walls), max(walls)
            print(f"| {label} | {shown} | {median:.3f} | {worst:.3f} | {chosen} |")


if __name__ == "__main__":
    main()
