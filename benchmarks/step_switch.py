"""How long each wizard step takes to open, and the longest the UI thread stalls meanwhile.

The App runs in-process (Textual's headless driver, 120x40) on tiny-cpu and on a 13B preset;
the steps are walked forward, back, and forward again (first visits compose the step, later
visits resume it). For every move it records:

- ``shown ms``: ctrl+n/ctrl+b sent until the first frame of the new step is drawn (the App's
  display call for that screen, outside a batch): what the user waits for. Work the step
  starts in thread workers (plan, NVML, Docker) goes on after it, behind its "computing…";
- ``idle ms``: until the step is mounted and the whole process idle (Pilot's press returns
  once a 20 ms window passes with < 1 ms of CPU in any thread, workers included);
- ``stall ms``: the longest gap between ticks of a 5 ms timer on the UI loop during that move
  and the 300 ms after it: work done on the UI thread (a plan, an NVML call, a big compose)
  shows here, work in thread workers does not.

    .venv/bin/python benchmarks/step_switch.py [--load N] [--preset NAME ...]

``--load N`` runs N busy processes beside it (the "loaded machine" case). Results: docs/wizard.md.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STEPS = ["checks", "model", "image", "hyperparams", "launch", "monitor"]


def _spin() -> None:
    while True:
        pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _walk(preset_name: str) -> list[tuple[str, float, float, float]]:
    from backend.preset import load_preset  # deferred: after sys.path names this checkout
    from tui.app import TrainwizApp  # deferred: the busy processes fork without it

    preset = load_preset(preset_name)
    launch = preset.launch.model_copy(update={"master_port": _free_port()})
    app = TrainwizApp(preset.model_copy(update={"launch": launch}), preset_name)
    rows: list[tuple[str, float, float, float]] = []
    shown: dict[str, float | None] = {"at": None}
    display = app._display

    def displayed(screen: object, renderable: object) -> None:
        showing = getattr(app, "_pending_step", None)
        if (shown["at"] is None and renderable is not None and not app._batch_count
                and showing == app.current_step and screen is app.screen):  # fmt: skip
            shown["at"] = time.perf_counter()
        display(screen, renderable)  # type: ignore[arg-type]

    app._display = displayed  # type: ignore[method-assign]
    async with app.run_test(size=(120, 40)) as pilot:
        loop = asyncio.get_running_loop()
        stall = {"max": 0.0, "last": loop.time()}
        ticking = True

        async def ticker() -> None:
            while ticking:
                await asyncio.sleep(0.005)
                now = loop.time()
                stall["max"] = max(stall["max"], now - stall["last"])
                stall["last"] = now

        tick = asyncio.create_task(ticker())
        await pilot.pause(1.0)
        order = STEPS[1:] + STEPS[-2::-1] + STEPS[1:]
        for target in order:
            here = app.current_step
            key = "ctrl+n" if STEPS.index(target) > STEPS.index(here) else "ctrl+b"
            first = app.step_screen(target) is None
            await pilot.pause(0.3)
            stall["max"], stall["last"] = 0.0, loop.time()
            app._pending_step, shown["at"] = target, None  # type: ignore[attr-defined]
            started = time.perf_counter()
            await pilot.press(key)
            while app.current_step != target or not app.screen.is_mounted:
                await pilot.pause(0.001)
            idle = (time.perf_counter() - started) * 1000
            for _ in range(5000):
                if shown["at"] is not None:
                    break
                await pilot.pause(0.001)
            drawn = (shown["at"] - started) * 1000 if shown["at"] is not None else float("nan")
            await pilot.pause(0.3)
            label = f"{here} -> {target}" + (" (first)" if first else "")
            rows.append((label, drawn, idle, stall["max"] * 1000))
        ticking = False
        await tick
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--load", type=int, default=0, help="busy processes beside the App")
    parser.add_argument("--preset", action="append", default=None)
    args = parser.parse_args()
    os.environ.setdefault("TRAINWIZ_HOME", tempfile.mkdtemp(prefix="twbench-"))
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for proc in spinners:
        proc.start()
    try:
        for name in args.preset or ["tiny-cpu", "vicuna-13b-v1.3-8xa100"]:
            rows = asyncio.run(_walk(name))
            print(f"\n{name}, load average {os.getloadavg()[0]:.1f}, +{args.load} busy\n")
            print("| move | shown ms | idle ms | UI stall ms |")
            print("|---|---|---|---|")
            for label, drawn, idle, stalled in rows:
                print(f"| {label} | {drawn:.0f} | {idle:.0f} | {stalled:.0f} |")
            drawns, idles = [r[1] for r in rows], [r[2] for r in rows]
            print(f"| **median / max** | {statistics.median(drawns):.0f} / {max(drawns):.0f} | "
                  f"{statistics.median(idles):.0f} / {max(idles):.0f} | "
                  f"{max(r[3] for r in rows):.0f} |")  # fmt: skip
    finally:
        for proc in spinners:
            proc.terminate()


if __name__ == "__main__":
    main()
