"""Per-GPU memory bar, utilisation, temperature, power against its limit, and who is on it;
for a multi-node run, grouped under a line per node that says how its sampler is doing."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual.widgets import Static

from backend.i18n import _
from backend.monitor import GpuSample, GpuSnapshot
from backend.monitor.gpu import NodeStatus
from backend.monitor.nodegpu import SOURCE as NODE_SOURCE
from backend.units import GIB


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
    if snap.source == NODE_SOURCE:
        return render_nodes(snap, width, compact)
    if snap.state == "no_driver":
        return Text(_("GPUs: {message}").format(message=snap.message), style="yellow")
    if snap.state == "error":
        return Text(_("GPUs: {message}").format(message=snap.message), style="red")
    if not snap.gpus:
        return Text(_("GPUs: NVML reports no GPU on this machine"), style="yellow")
    out = Text()
    _gpu_lines(out, snap.gpus, width, compact)
    return out


def _gpu_lines(out: Text, gpus: Iterable[GpuSample], width: int, compact: bool) -> None:
    bar_w = max(6, min(24, width - (64 if compact else 58)))
    for n, g in enumerate(gpus):
        if n or out.plain:
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
            others = sum(p.owner == "other" for p in g.processes)
            unknown = len(g.processes) - ours - others
            if ours:
                out.append(_(" ▶{ours} run").format(ours=ours), style="bold green")
            if others:
                out.append(_(" {others} other").format(others=others), style="yellow")
            if unknown:  # e.g. another node's pids seen from a recording
                out.append(_(" {unknown} proc").format(unknown=unknown), style="dim")
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


_NODE_STYLE = {
    "ok": "",
    "no_gpu": "yellow",
    "error": "red",
    "stopped": "dim",
    "gone": "bold red",
    "waiting": "dim",
}


def render_nodes(snap: GpuSnapshot, width: int = 78, compact: bool = False) -> Text:
    """A multi-node run: a line per node (its name, host, GPU count, sampler state), then
    that node's GPUs; a node without GPUs or whose sampler stopped says so on its line."""
    if not snap.nodes:
        return Text(_("GPUs: waiting for the nodes' GPU samplers…"), style="dim")
    out = Text()
    for status in snap.nodes:
        gpus = [g for g in snap.gpus if g.node == status.node]
        if out.plain:
            out.append("\n")
        out.append_text(_node_line(status, gpus, width))
        _gpu_lines(out, gpus, width, compact)
    return out


def _node_line(status: NodeStatus, gpus: list[GpuSample], width: int) -> Text:
    line = Text(status.node, style="bold cyan")
    if status.host:
        line.append(f" {status.host}", style="cyan")
    if status.gpus:
        line.append(f" · {status.gpus}× {_short(gpus[0].name) if gpus else 'GPU'}")
    style = _NODE_STYLE.get(status.state, "")
    age = status.age_s or 0.0
    if status.state == "ok":
        if age >= 3:
            line.append(" · " + _("last sample {age:.0f} s ago").format(age=age), style="dim")
    elif status.state == "no_gpu":
        line.append(" · " + _("no GPU on this node"), style=style)
    elif status.state == "gone" and status.age_s is None:
        line.append(" · " + _("sampler gone: it never wrote (see the log)"), style=style)
    elif status.state == "gone":
        line.append(
            " · " + _("sampler gone: no sample for {age:.0f} s").format(age=age), style=style
        )
    elif status.state == "stopped":
        line.append(" · " + _("sampler stopped"), style="yellow")
        reason = status.message.partition(": ")[2]
        if reason:
            line.append(f" ({reason})", style=style)
    elif status.state == "waiting":
        line.append(" · " + _("waiting for its sampler"), style=style)
    else:
        line.append(f" · {status.message}", style=style)
    line.truncate(max(20, width), overflow="ellipsis")
    return line


def panel_lines(snap: GpuSnapshot) -> int:
    """Lines the panel needs uncompacted (two per GPU, one per node)."""
    return len(snap.gpus) * 2 + len(snap.nodes)


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
        compact = panel_lines(snap) > max(4, self.screen.size.height // 4)
        self.update(render_snapshot(snap, self.size.width or 78, compact=compact))
