"""Charts of the run records, drawn at build time as SVG files of the site (matplotlib; nothing is
requested from anywhere when a reader opens them).

Which chart a set of cases gets is read from their `params`, never from a probe's name: cases of one
`params.set` that vary a numeric parameter (seqlen) or the M of an MxNxK shape over three or more
values get a line chart of ours / baseline along it (one line per combination of the other varying
parameters, split into panels when there would be more than six lines); every other case gets a bar
in a ratio-per-case chart. A probe with two or more runs also gets the history of its cases' ratios.

Drawing is the slow part, so each SVG is cached under .kernelwiki-cache/charts/ by the hash of
exactly what it shows.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwiki.model.files import UnsafeFile, read_regular, replace_file
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest

MAX_LINES = 6
_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)$")  # MxNxK
_IGNORED = {"set", "shape", "dtype", "ablation"}
MAX_SVG_BYTES = 8 << 20
STYLE_VERSION = "1"  # bump when the drawing code changes, so cached SVGs are redrawn


@dataclass
class Chart:
    """What one chart shows; `name` is its file name under assets/charts/."""

    kind: str  # "lines" | "bars" | "history"
    title: str
    xlabel: str
    ylabel: str
    panels: dict[str, dict[str, list[tuple[Any, float]]]] = field(default_factory=dict)
    """panel title -> series label -> points (x, ratio); for bars, x is the case label."""

    @property
    def name(self) -> str:
        return hashlib.sha256(self.key().encode()).hexdigest()[:16] + ".svg"

    def key(self) -> str:
        return json.dumps([STYLE_VERSION, self.kind, self.title, self.xlabel, self.ylabel, self.panels],
                          sort_keys=True, default=str)


@dataclass
class Point:
    case: str
    params: dict
    ratio: float
    baseline: str


def _points(record: Record, cases: set[str] | None) -> list[Point]:
    out = []
    for case in record.data.get("cases") or []:
        head = case.get("headline") or {}
        ratio = head.get("ratio")
        if case.get("status") != "passed" or not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
            continue
        if cases is not None and case.get("id") not in cases:
            continue
        out.append(Point(str(case.get("id")), dict(case.get("params") or {}), float(ratio),
                         str(head.get("baseline") or "baseline")))
    return out


def _axis(points: list[Point]) -> tuple[str, dict[str, Any]] | None:
    """The parameter to draw along (name, case -> x value), or None when no line chart fits."""
    numeric: dict[str, dict[str, Any]] = {}
    for p in points:
        for key, value in p.params.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                numeric.setdefault(key, {})[p.case] = value
    best = max(((k, v) for k, v in numeric.items() if len(v) == len(points) and len(set(v.values())) >= 3),
               key=lambda kv: len(set(kv[1].values())), default=None)
    if best:
        return best
    shapes = {p.case: _SHAPE.match(str(p.params.get("shape", ""))) for p in points}
    if all(shapes.values()) and len({int(m.group(1)) for m in shapes.values()}) >= 3:
        return "M", {case: int(m.group(1)) for case, m in shapes.items()}
    return None


def _series(points: list[Point], axis: str, xs: dict[str, Any]) -> dict[str, dict[str, list[tuple[Any, float]]]]:
    varying = [k for k in sorted({k for p in points for k in p.params})
               if k not in _IGNORED and k != axis and len({str(p.params.get(k)) for p in points}) > 1]
    def label(p: Point, keys: list[str]) -> str:
        parts = [f"{k}={p.params.get(k)}" for k in keys]
        if axis == "M":
            shape = _SHAPE.match(str(p.params.get("shape")))
            parts.insert(0, f"N×K={shape.group(2)}×{shape.group(3)}")
        return ", ".join(parts) or "ratio"
    lines: dict[str, list[tuple[Any, float]]] = {}
    for p in points:
        lines.setdefault(label(p, varying), []).append((xs[p.case], p.ratio))
    if axis == "M" and all(len(v) == 1 for v in lines.values()):  # square sizes: one line along M
        lines = {}
        for p in points:
            lines.setdefault(", ".join(f"{k}={p.params.get(k)}" for k in varying) or "ratio", []).append(
                (xs[p.case], p.ratio))
    panels = {"": lines}
    if len(lines) > MAX_LINES:
        facet = min((k for k in varying if len({str(p.params.get(k)) for p in points}) > 1),
                    key=lambda k: len({str(p.params.get(k)) for p in points}), default=None)
        if facet:
            rest = [k for k in varying if k != facet]
            panels = {}
            for p in points:
                panels.setdefault(f"{facet}={p.params.get(facet)}", {}).setdefault(label(p, rest), []).append(
                    (xs[p.case], p.ratio))
    return {title: {name: sorted(pts) for name, pts in lines.items()} for title, lines in panels.items()}


def case_charts(spec: ProbeSpec, record: Record, cases: set[str] | None) -> list[Chart]:
    """Ours over the baseline for every case of the latest run (restricted to `cases`)."""
    points = _points(record, cases)
    if not points:
        return []
    groups: dict[str, list[Point]] = {}
    for p in points:
        groups.setdefault(str(p.params.get("set") or ""), []).append(p)
    charts, leftovers = [], []
    for name, group in groups.items():
        axis = _axis(group)
        baselines = sorted({p.baseline for p in group})
        if axis is None or len(baselines) != 1:
            leftovers += group
            continue
        charts.append(Chart("lines", f"{spec.id}{' — ' + name if name else ''}: ratio by {axis[0]}",
                            axis[0], f"throughput ÷ {baselines[0]}", _series(group, *axis)))
    if leftovers:
        bars = {}
        for p in leftovers:
            bars.setdefault(str(p.params.get("set") or p.baseline), []).append((p.case, p.ratio))
        charts.append(Chart("bars", f"{spec.id}: throughput ÷ baseline per case", "", "throughput ÷ baseline",
                            {"": bars}))
    return charts


def history_chart(spec: ProbeSpec, records: list[Record], cases: set[str] | None) -> Chart | None:
    """The ratio of the cases seen most often, run after run."""
    runs = [r for r in records if r.data.get("mode") == "run"]
    seen: dict[str, list[tuple[str, float]]] = {}
    for record in runs:
        for p in _points(record, cases):
            seen.setdefault(p.case, []).append((record.started[:16].replace("T", " "), p.ratio))
    repeated = {case: pts for case, pts in seen.items() if len(pts) >= 2}
    if len({x for pts in repeated.values() for x, _ in pts}) < 2:
        return None
    top = sorted(repeated, key=lambda c: (-len(repeated[c]), c))[:MAX_LINES]
    return Chart("history", f"{spec.id}: ratio to the baseline, run by run", "run (UTC)", "throughput ÷ baseline",
                 {"": {case: repeated[case] for case in sorted(top)}})


def draw(chart: Chart, cache: Path) -> str:
    """The chart as SVG text, from the cache when it was drawn before."""
    cached = cache / chart.name
    usable = _usable(cache)
    if usable:
        try:
            return read_regular(cached, MAX_SVG_BYTES).decode("utf-8")
        except (UnsafeFile, UnicodeDecodeError):
            pass  # absent, a link, a FIFO or garbage: drawn again and replaced
    svg = _draw(chart)
    if usable:
        try:
            replace_file(cached, svg.encode("utf-8"))
        except OSError:
            pass  # a cache that cannot be written costs only a redraw next time
    return svg


def _usable(cache: Path) -> bool:
    """Whether the chart cache is a real directory of this checkout's cache (made if absent): never
    a symbolic link, at either level, that would make the build read or write files elsewhere."""
    for directory in (cache.parent, cache):
        if directory.is_symlink():
            return False
        try:
            directory.mkdir(exist_ok=True)
        except OSError:
            return False
        if not directory.is_dir():
            return False
    return True


def _draw(chart: Chart) -> str:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grey = "#808080"
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kernelwiki", "font.size": 9,
                         "text.color": grey, "axes.labelcolor": grey, "xtick.color": grey, "ytick.color": grey,
                         "axes.edgecolor": grey, "font.family": "sans-serif",
                         "text.parse_math": False})  # labels come from records: `$x$` is text, not TeX
    panels = chart.panels
    if chart.kind == "bars":
        labels = [(group, case, ratio) for group, pts in panels[""].items() for case, ratio in pts]
        fig, ax = plt.subplots(figsize=(7.2, 1.4 + 0.22 * len(labels) + 0.12 * len(panels[""])))
        colors = {g: f"C{i % 10}" for i, g in enumerate(panels[""])}
        ys = list(range(len(labels)))[::-1]
        ax.barh(ys, [r for _, _, r in labels], color=[colors[g] for g, _, _ in labels], height=0.7)
        ax.set_yticks(ys, [case for _, case, _ in labels], fontsize=7)
        ax.axvline(1.0, color=grey, linewidth=0.8, linestyle="--")
        ax.set_xlabel(chart.ylabel)
        for y, (_, _, ratio) in zip(ys, labels):
            ax.text(ratio, y, f" {ratio:.3g}", va="center", fontsize=6.5)
        if len(colors) > 1:
            from matplotlib.patches import Patch

            ax.legend(handles=[Patch(color=c, label=g) for g, c in colors.items()], fontsize=6.5, frameon=False,
                      loc="upper center", bbox_to_anchor=(0.5, -0.5 / (0.8 + 0.22 * len(labels)) - 0.06), ncol=3)
        axes = [ax]
    else:
        most = max(len(lines) for lines in panels.values())
        fig, axes_grid = plt.subplots(1, len(panels), figsize=(7.2 if len(panels) == 1 else 3.8 * len(panels),
                                                               3.2 + 0.13 * most),
                                      squeeze=False, sharey=True)
        axes = list(axes_grid[0])
        runs = sorted({x for lines in panels.values() for pts in lines.values() for x, _ in pts})
        for ax, (title, lines) in zip(axes, panels.items()):
            for name, pts in lines.items():
                xs = [runs.index(x) if chart.kind == "history" else x for x, _ in pts]
                ax.plot(xs, [y for _, y in pts], marker="o", markersize=3.5, linewidth=1.4, label=name)
            ax.axhline(1.0, color=grey, linewidth=0.8, linestyle="--")
            if chart.kind == "lines":
                ax.set_xscale("log", base=2)
                xs = sorted({x for pts in lines.values() for x, _ in pts})
                ax.set_xticks(xs, [str(x) for x in xs], fontsize=7)
                ax.minorticks_off()
            else:
                ax.set_xticks(range(len(runs)), runs, rotation=30, ha="right", fontsize=6.5)
            ax.set_xlabel(chart.xlabel)
            if title:
                ax.set_title(title, fontsize=9, color=grey)
            if len(lines) > 1:
                ax.legend(fontsize=6.5, frameon=False, loc="upper center", ncol=2,
                          bbox_to_anchor=(0.5, -0.3 if chart.kind == "history" else -0.16))
        axes[0].set_ylabel(chart.ylabel)
    for ax in axes:
        ax.set_facecolor("none")
        ax.grid(True, color=grey, alpha=0.2, linewidth=0.5)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    fig.suptitle(chart.title, fontsize=9.5, color=grey)
    fig.tight_layout()
    out = io.StringIO()
    fig.savefig(out, format="svg", transparent=True, metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def page_charts(page_id: str, probes: dict[str, ProbeSpec], records: dict[str, list[Record]]) -> list[Chart]:
    """Every chart of the probes backing a page, drawn from the cases that concern that page."""
    charts = []
    for spec in probes.values():
        if page_id not in spec.pages or not records.get(spec.id):
            continue
        cases = {str(c.get("id")) for c in spec.data.get("cases") or []
                 if isinstance(c, dict) and (not c.get("pages") or page_id in c["pages"])}
        record = latest(records[spec.id], mode="run", with_cases=True)
        if record is not None:
            charts += case_charts(spec, record, cases)
        history = history_chart(spec, records[spec.id], cases)
        if history is not None:
            charts.append(history)
    return charts
