"""Charts of the run records, drawn at build time as SVG files of the site (matplotlib; nothing is
requested from anywhere when a reader opens them).

Which chart a set of cases gets is read from their `params`, never from a probe's name: cases of one
`params.set` and one baseline that vary a numeric parameter (seqlen) or the M of an MxNxK shape over
three or more values get a line chart of the real quantity (TFLOP/s, TB/s) along it, ours solid and
the baseline dashed in the same colour, with the % of the measured ceiling (the calibration probe's,
when the record has it) or else of the datasheet peak on the second axis (one line per combination
of the other varying parameters; more than six lines become several charts, one below the other,
never panels side by side); every other case gets a pair of bars, ours and the baseline, in a chart
per baseline. Cases where a call's time is what a reader needs (decode: M, m or batch of at most
LATENCY_M) also get their latency in µs, ours and the baseline, from the record's timings. A probe
with two or more runs also gets the history of its cases' ratios. Each chart is drawn twice, for the light and the dark scheme (Material's #only-light and
#only-dark), with text at WCAG AA contrast on either background.

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

from kernelwiki.harness.env import short_gpu_name
from kernelwiki.harness.peaks import peak_for
from kernelwiki.model.files import UnsafeFile, read_regular, replace_file
from kernelwiki.model.safe_links import svg_problems
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest

MAX_LINES = 6
TIME_UNITS = {"us", "µs", "ms", "ns"}
"""Headline units of a kernel's time per call (a compile time in s is not one)."""
LATENCY_M = 64
"""Cases with an M (shape MxNxK, param m) or a batch of at most this many rows are decode-like: their
latency gets a chart of its own."""
_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)$")  # MxNxK
_IGNORED = {"set", "shape", "dtype", "ablation"}
MAX_SVG_BYTES = 8 << 20
STYLE_VERSION = "4"  # bump when the drawing code changes, so cached SVGs are redrawn


@dataclass
class Chart:
    """What one chart shows; `name` is its file name under assets/charts/."""

    kind: str  # "lines" | "bars" | "history"
    title: str
    xlabel: str
    ylabel: str
    panels: dict[str, dict[str, list[tuple]]] = field(default_factory=dict)
    """panel title -> series label -> points: (x, ours, baseline) for lines and bars (for bars x
    is the case label), (run, ratio) for history."""
    baseline: str = ""
    ceiling: float | None = None
    """What the second axis shows a % of, in the chart's unit: the measured ceiling when the record
    has it, else the datasheet peak (`ceiling_name` says which)."""
    ceiling_name: str = "the measured ceiling"

    @property
    def name(self) -> str:
        return hashlib.sha256(self.key().encode()).hexdigest()[:16] + ".svg"

    @property
    def dark_name(self) -> str:
        return self.name.removesuffix(".svg") + "-dark.svg"

    def key(self) -> str:
        return json.dumps([STYLE_VERSION, self.kind, self.title, self.xlabel, self.ylabel, self.panels,
                           self.baseline, self.ceiling, self.ceiling_name], sort_keys=True, default=str)


@dataclass
class Point:
    case: str
    params: dict
    ratio: float | None
    baseline: str
    value: float | None = None
    baseline_value: float | None = None
    unit: str = ""
    ceiling: float | None = None
    peak: float | None = None
    latency_us: tuple[float, float] | None = None
    """(ours, baseline) median time of one call in µs, where the record's timings hold both."""

    @property
    def shown(self) -> tuple[float, float]:
        return (self.value, self.baseline_value)


def _points(record: Record, cases: set[str] | None) -> list[Point]:
    out = []
    gpu = short_gpu_name((record.data.get("environment") or {}).get("gpu"))
    for case in record.data.get("cases") or []:
        head = case.get("headline") or {}
        ratio = head.get("ratio") if _number(head.get("ratio")) else None
        if case.get("status") != "passed" or not _number(head.get("value")):
            continue
        if cases is not None and case.get("id") not in cases:
            continue
        value, base, frac = head.get("value"), head.get("baseline_value"), record.fraction_of_ceiling(head)
        base = base if ratio is not None else None
        out.append(Point(str(case.get("id")), dict(case.get("params") or {}), ratio,
                         str(head.get("baseline") or "baseline"), float(value) if _number(value) else None,
                         float(base) if _number(base) else None, str(head.get("unit") or ""),
                         float(value) / frac if _number(value) and _number(frac) and frac > 0 else None,
                         peak_for(head.get("unit"), case.get("params") or {}, gpu)[1],
                         _latency(case, head)))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _latency(case: dict, head: dict) -> tuple[float, float] | None:
    """(ours, baseline) in µs from the case's timings: the baseline's entry is named as the headline
    names it; ours is `ours`, else the one entry whose time matches the headline's ratio (a probe may
    call its kernel by what it is, `cuda_cores`)."""
    timing = case.get("timing") if isinstance(case.get("timing"), dict) else {}
    times = {str(k): v["median_ms"] * 1000 for k, v in timing.items()
             if isinstance(v, dict) and _number(v.get("median_ms")) and v["median_ms"] > 0}
    name, ratio = str(head.get("baseline") or ""), head.get("ratio")
    base = times.get(name) or next((t for k, t in times.items() if k.lower() == name.lower()), None)
    if base is None or not _number(ratio) or ratio <= 0:
        return None
    ours = times.get("ours")
    if ours is None:   # time falls as throughput rises: ours = baseline time / ratio
        near = [t for k, t in times.items() if k.lower() != name.lower() and abs(t * ratio / base - 1) < 0.03]
        ours = near[0] if len(near) == 1 else None
    return (ours, base) if ours is not None else None


def _rows(params: dict) -> int | None:
    """M of an MxNxK shape, or the m or batch parameter: how many rows one call works on."""
    shape = _SHAPE.match(str(params.get("shape", "")))
    if shape:
        return int(shape.group(1))
    for key in ("m", "batch"):
        if _number(params.get(key)):
            return int(params[key])
    return None


def _reference(group: list[Point]) -> tuple[float | None, str]:
    """What the second axis is a % of: the measured ceiling (the record's, by the case's kind) when the
    points share one, else the datasheet peak (harness.peaks, by dtype) when they share it, else nothing."""
    for values, name in (([p.ceiling for p in group if p.ceiling], "the measured ceiling"),
                         ([p.peak for p in group if p.peak], "the datasheet peak")):
        if values and max(values) <= min(values) * 1.01:
            return sum(values) / len(values), name
    return None, ""


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
        return ", ".join(parts) or "ours"
    lines: dict[str, list[tuple[Any, float]]] = {}
    for p in points:
        lines.setdefault(label(p, varying), []).append((xs[p.case], *p.shown))
    if axis == "M" and all(len(v) == 1 for v in lines.values()):  # square sizes: one line along M
        lines = {}
        for p in points:
            lines.setdefault(", ".join(f"{k}={p.params.get(k)}" for k in varying) or "ours", []).append(
                (xs[p.case], *p.shown))
    panels = {"": lines}
    if len(lines) > MAX_LINES:
        facet = min((k for k in varying if len({str(p.params.get(k)) for p in points}) > 1),
                    key=lambda k: len({str(p.params.get(k)) for p in points}), default=None)
        if facet:
            rest = [k for k in varying if k != facet]
            panels = {}
            for p in points:
                panels.setdefault(f"{facet}={p.params.get(facet)}", {}).setdefault(label(p, rest), []).append(
                    (xs[p.case], *p.shown))
    return {title: {name: sorted(pts) for name, pts in lines.items()} for title, lines in panels.items()}


def case_charts(spec: ProbeSpec, record: Record, cases: set[str] | None) -> list[Chart]:
    """Ours and the baseline, in their unit, for every case of the latest run (restricted to `cases`)."""
    points = [p for p in _points(record, cases) if p.value is not None and p.baseline_value is not None]
    if not points:
        return []
    groups: dict[tuple[str, str, str], list[Point]] = {}
    for p in points:
        groups.setdefault((str(p.params.get("set") or ""), p.baseline, p.unit), []).append(p)
    charts, leftovers = [], []
    for (name, baseline, unit), group in groups.items():
        axis = _axis(group)
        if axis is None:
            leftovers += group
            continue
        ceiling, ceiling_name = _reference(group)
        for panel, lines in _series(group, *axis).items():
            where = " — ".join(x for x in (name, panel) if x)
            charts.append(Chart("lines", f"{unit} by {axis[0]}: ours vs {baseline}" + (f" (set: {where})" if where else ""),
                                axis[0], unit, {"": lines}, baseline, ceiling, ceiling_name or "the measured ceiling"))
    by_baseline: dict[tuple[str, str], list[Point]] = {}
    for p in leftovers:
        by_baseline.setdefault((p.baseline, p.unit), []).append(p)
    for (baseline, unit), group in by_baseline.items():
        if unit in TIME_UNITS:
            continue  # drawn with every case of its unit in one chart (time_charts)
        ceiling, ceiling_name = _reference(group)
        bars: dict[str, list[tuple]] = {}
        for p in group:
            bars.setdefault(str(p.params.get("set") or ""), []).append((p.case, *p.shown))
        charts.append(Chart("bars", f"{unit} per case: ours vs {baseline}", "", unit, {"": bars}, baseline, ceiling,
                            ceiling_name or "the measured ceiling"))
    return charts + time_charts(_points(record, cases)) + latency_charts(points)


def time_charts(points: list[Point]) -> list[Chart]:
    """Cases whose headline is a time (launch overhead per launch, say): every case of one unit as a
    bar in one chart, those without a baseline too, since each may compare with a different one."""
    by_unit: dict[str, dict[str, list[tuple]]] = {}
    for p in points:
        if p.unit in TIME_UNITS:
            by_unit.setdefault(p.unit, {}).setdefault(str(p.params.get("set") or ""), []).append((p.case, p.value, None))
    return [Chart("bars", f"time per case ({_unit_name(unit)}; lower is better)", "",
                  f"{_unit_name(unit)} (lower is better)", {"": bars}) for unit, bars in by_unit.items()]


def _unit_name(unit: str) -> str:
    return "µs" if unit == "us" else unit



def latency_charts(points: list[Point]) -> list[Chart]:
    """µs per call, ours and the baseline, for the decode-like cases (few rows: a reader sizes a
    decode step by its time, not by a throughput far below peak), one chart per baseline. Cases
    whose headline is a time already are drawn in it by the charts above."""
    by_baseline: dict[str, dict[str, list[tuple]]] = {}
    for p in points:
        rows = _rows(p.params)
        if p.latency_us is None or rows is None or rows > LATENCY_M or p.unit in TIME_UNITS:
            continue
        by_baseline.setdefault(p.baseline, {}).setdefault(str(p.params.get("set") or ""), []).append(
            (p.case, *p.latency_us))
    return [Chart("bars", f"latency per call (≤ {LATENCY_M} rows): ours vs {baseline}", "", "µs per call (lower is better)",
                  {"": bars}, baseline) for baseline, bars in by_baseline.items()]


def history_chart(spec: ProbeSpec, records: list[Record], cases: set[str] | None) -> Chart | None:
    """The ratio of the cases seen most often, run after run."""
    runs = [r for r in records if r.data.get("mode") == "run"]
    seen: dict[str, list[tuple[str, float]]] = {}
    for record in runs:
        for p in _points(record, cases):
            if p.ratio is not None:
                seen.setdefault(p.case, []).append((record.started[:16].replace("T", " "), p.ratio))
    repeated = {case: pts for case, pts in seen.items() if len(pts) >= 2}
    if len({x for pts in repeated.values() for x, _ in pts}) < 2:
        return None
    top = sorted(repeated, key=lambda c: (-len(repeated[c]), c))[:MAX_LINES]
    return Chart("history", f"{spec.id}: ratio to the baseline, run by run", "run (UTC)", "throughput ÷ baseline",
                 {"": {case: repeated[case] for case in sorted(top)}})


def draw(chart: Chart, cache: Path, scheme: str = "light") -> str:
    """The chart as SVG text for a colour scheme, from the cache when it was drawn before."""
    cached = cache / (chart.dark_name if scheme == "dark" else chart.name)
    usable = _usable(cache)
    if usable:
        try:
            data = read_regular(cached, MAX_SVG_BYTES)
            if not svg_problems(data):   # the cache is untrusted: a planted script is never published
                return data.decode("utf-8")
        except (UnsafeFile, UnicodeDecodeError):
            pass  # absent, a link, a FIFO or garbage: drawn again and replaced
    svg = _draw(chart, scheme)
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


SCHEMES = {
    # text colours at WCAG AA (>= 4.5:1) on Material's light (#fff) and slate (#1e2129) backgrounds;
    # the series colours are Tableau's ten, distinguishable on both.
    "light": {"text": "#333333", "grid": "#999999"},
    "dark": {"text": "#e3e3e3", "grid": "#8a8a8a"},
}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _draw(chart: Chart, scheme: str = "light") -> str:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ink, grid = SCHEMES[scheme]["text"], SCHEMES[scheme]["grid"]
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kernelwiki", "font.size": 10,
                         "text.color": ink, "axes.labelcolor": ink, "xtick.color": ink, "ytick.color": ink,
                         "axes.edgecolor": ink, "font.family": "sans-serif",
                         "text.parse_math": False})  # labels come from records: `$x$` is text, not TeX
    lines = chart.panels.get("") or next(iter(chart.panels.values()), {})
    # Legends and tick labels build their own Text objects; a `$` in a label from a record must not
    # start TeX there either: it is shown as the full-width dollar sign.
    lines = {_fit(name.replace("$", "\uff04")): pts for name, pts in lines.items()}
    chart = Chart(chart.kind, *(str(t).replace("$", "\uff04") for t in (chart.title, chart.xlabel, chart.ylabel)),
                  chart.panels, _fit(str(chart.baseline).replace("$", "\uff04")), chart.ceiling, chart.ceiling_name)
    if chart.kind == "bars":
        lines = {name: [(_fit(str(p[0]).replace("$", "\uff04")), *p[1:]) for p in pts] for name, pts in lines.items()}
    if chart.kind != "history":  # (x, ours) without a baseline value: the baseline is not drawn
        lines = {name: [tuple(p) + (None,) * (3 - len(p)) for p in pts] for name, pts in lines.items()}
    handles: list = []
    if chart.kind == "bars":
        labels = [(group, *point) for group, pts in lines.items() for point in pts]
        fig, ax = plt.subplots(figsize=(6.0, 1.2 + 0.34 * len(labels)))
        ys = list(range(len(labels)))[::-1]
        paired = any(p[3] is not None for p in labels)
        offset = 0.2 if paired else 0.0
        ax.barh([y + offset for y in ys], [p[2] for p in labels], height=0.38 if paired else 0.6, color=PALETTE[0],
                label="ours")
        if paired:
            ax.barh([y - 0.2 for y in ys], [p[3] or 0 for p in labels], height=0.38, color=PALETTE[1],
                    label=chart.baseline or "baseline")
        ax.set_yticks(ys, [p[1] for p in labels], fontsize=8)
        for y, p in zip(ys, labels):
            ax.text(p[2], y + offset, f" {p[2]:.3g}", va="center", fontsize=7.5)
        ax.set_xlabel(chart.ylabel)
        if paired:
            ax.legend(fontsize=8, frameon=False, loc="upper center", ncol=2,
                      bbox_to_anchor=(0.5, -0.9 / (1.2 + 0.34 * len(labels))))
        if chart.ceiling:
            top = ax.secondary_xaxis("top", functions=(lambda v: v / chart.ceiling * 100, lambda q: q * chart.ceiling / 100))
            top.set_xlabel(f"% of {chart.ceiling_name}", fontsize=8)
    else:
        fig, ax = plt.subplots(figsize=(6.0, 3.6 + 0.18 * len(lines)))
        if chart.kind == "history":
            runs = sorted({x for pts in lines.values() for x, _ in pts})
        for i, (name, pts) in enumerate(lines.items()):
            colour = PALETTE[i % len(PALETTE)]
            if chart.kind == "history":
                ax.plot([runs.index(x) for x, _ in pts], [y for _, y in pts], marker="o", markersize=4,
                        linewidth=1.5, color=colour, label=name)
                continue
            xs = [x for x, *_ in pts]
            ax.plot(xs, [v for _, v, _ in pts], marker="o", markersize=4, linewidth=1.6, color=colour)
            ax.plot(xs, [float("nan") if b is None else b for _, _, b in pts], marker="x", markersize=4, linewidth=1.2, linestyle="--", color=colour)
            if len(lines) > 1:  # one series needs no colour key, only the ours/baseline key
                handles.append(Line2D([], [], color=colour, linewidth=2, label=name))
        if chart.kind == "history":
            ax.axhline(1.0, color=grid, linewidth=0.8, linestyle="--")
            ax.set_xticks(range(len(runs)), runs, rotation=30, ha="right", fontsize=8)
            handles = ax.get_legend_handles_labels()[0]
        else:
            ax.set_xscale("log", base=2)
            xs = sorted({x for pts in lines.values() for x, *_ in pts})
            ax.set_xticks(xs, [str(x) for x in xs], fontsize=8)
            ax.minorticks_off()
            ax.set_ylim(bottom=0)
            key = PALETTE[0] if len(lines) == 1 else ink
            handles += [Line2D([], [], color=key, linewidth=1.6, marker="o", label="ours"),
                        Line2D([], [], color=key, linewidth=1.2, linestyle="--", marker="x",
                               label=chart.baseline or "baseline")]
            if chart.ceiling:
                right = ax.secondary_yaxis("right", functions=(lambda v: v / chart.ceiling * 100,
                                                               lambda q: q * chart.ceiling / 100))
                right.set_ylabel(f"% of {chart.ceiling_name}", fontsize=9)
        ax.set_xlabel(chart.xlabel)
        ax.set_ylabel(chart.ylabel)
        if handles:
            ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper center", ncol=2,
                      bbox_to_anchor=(0.5, -0.32 if chart.kind == "history" else -0.16))
    ax.set_facecolor("none")
    ax.grid(True, color=grid, alpha=0.35, linewidth=0.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(chart.title, fontsize=10, color=ink, wrap=True, parse_math=False)
    out = io.StringIO()
    # bbox_inches="tight": the legend below the axes is part of the SVG, never cut off.
    fig.savefig(out, format="svg", transparent=True, bbox_inches="tight", metadata={"Date": None})
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


LABEL_CHARS = 24
"""Longer labels (a baseline named by its whole pipeline, a long case id) are shortened with an
ellipsis: the tight bounding box grows with the longest label, and a chart must stay one phone-
readable panel (tests/test_site.py checks the width)."""


def _fit(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "\u2026"
