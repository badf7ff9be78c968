"""Per-GPU memory bar, utilisation, temperature, power against its limit, and who is on it."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from backend.i18n import _
from backend.monitor import GpuSnapshot

GIB = 1024**3


def _bar(frac: float, width: int) -> Text:
    frac = min(max(frac, 0.0), 1.0)
    full = round(frac * width)
    style = "green" if frac < 0.8 else ("yellow" if frac < 0.95 else "red")
    return Text.assemble(("█" * full, style), ("░" * (width - full), "dim"))


def _short(name: str) -> str:
    return name.replace("NVIDIA ", "").replace("GeForce ", "")


def render_snapshot(snap: GpuSnapshot | None, width: int = 78, compact: bool = False) -> Text:
    """The panel's text; a pure function so tests can assert on it without a terminal.

    ``compact`` gives one line per GPU (8 GPUs in an 80x24 terminal): processes become counts.
    """
    if snap is None:
        return Text(_("GPUs: waiting for the first sample…"), style="dim")
    if snap.state == "no_driver":
        return Text(_("GPUs: {message}").format(message=snap.message), style="yellow")
    if snap.state == "error":
        return Text(_("GPUs: {message}").format(message=snap.message), style="red")
    if not snap.gpus:
        return Text(_("GPUs: NVML reports no GPU on this machine"), style="yellow")
    out = Text()
    bar_w = max(6, min(24, width - (64 if compact else 58)))
    for n, g in enumerate(snap.gpus):
        if n:
            out.append("\n")
        out.append(f"GPU{g.index} ", style="bold")
        out.append(f"{_short(g.name)[:10]:<10} ")
        out.append_text(_bar(g.mem_fraction, bar_w))
        out.append(f" {g.mem_used / GIB:5.1f}/{g.mem_total / GIB:.0f}G")
        out.append(f" {g.util:3d}%" if g.util is not None else "   ?%")
        out.append(f" {g.temp_c:3d}°C" if g.temp_c is not None else "   ?°C")
        if g.power_w is not None:
            frac = g.power_w / g.power_limit_w if g.power_limit_w else 0.0
            style = "red" if frac > 0.95 else ("yellow" if frac > 0.8 else "")
            limit = f"/{g.power_limit_w:.0f}" if g.power_limit_w else ""
            out.append(f" {g.power_w:4.0f}{limit}W", style=style)
        if compact:
            ours = sum(p.owner == "this run" for p in g.processes)
            others = len(g.processes) - ours
            if ours:
                out.append(_(" ▶{ours} run").format(ours=ours), style="bold green")
            if others:
                out.append(_(" {others} other").format(others=others), style="yellow")
            if not g.processes:
                out.append(_(" idle"), style="dim")
            continue
        out.append("\n     ")
        if not g.processes:
            out.append(_("no processes"), style="dim")
        for k, p in enumerate(g.processes):
            if k:
                out.append("  ")
            used = f" {p.used_bytes / GIB:.1f}G" if p.used_bytes is not None else ""
            label = f"{p.pid}{' ' + p.name if p.name else ''}{used}"
            if p.owner == "this run":
                out.append(_("▶ {label} this run").format(label=label), style="bold green")
            elif p.owner == "other":
                out.append(_("{label} other").format(label=label), style="yellow")
            else:
                out.append(f"{label} ?", style="dim")
    return out


class GpuPanel(Static, can_focus=True):
    """Shows the latest GpuSnapshot; the sampler runs elsewhere (a worker) and posts them."""

    ALLOW_MAXIMIZE = True

    DEFAULT_CSS = """
    GpuPanel { height: auto; max-height: 17; overflow-y: auto; padding: 0 0; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(render_snapshot(None), id=id)
        self.snapshot: GpuSnapshot | None = None

    def show(self, snap: GpuSnapshot) -> None:
        self.snapshot = snap
        # Two lines per GPU while that leaves the chart and log room; one line otherwise.
        compact = len(snap.gpus) * 2 > max(4, self.screen.size.height // 4)
        self.update(render_snapshot(snap, self.size.width or 78, compact=compact))
