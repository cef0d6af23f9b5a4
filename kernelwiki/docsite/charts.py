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
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwiki.harness.env import short_gpu_name
from kernelwiki.harness.peaks import peak_for
from kernelwiki.model.files import UnsafeFile, read_regular, replace_file
from kernelwiki.model.safe_links import svg_problems
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record

MAX_LINES = 6
TIME_UNITS = {"us", "µs", "ms", "ns"}
"""Headline units of a kernel's time per call (a compile time in s is not one)."""
LATENCY_M = 64
"""Cases with an M (shape MxNxK, param m) or a batch of at most this many rows are decode-like: their
latency gets a chart of its own."""
_SHAPE = re.compile(r"^(\d+)x(\d+)x(\d+)$")  # MxNxK
_IGNORED = {"set", "shape", "dtype", "ablation"}
MAX_SVG_BYTES = 8 << 20
STYLE_VERSION = "5"  # bump when the drawing code changes, so cached SVGs are redrawn


@dataclass
class Chart:
    """What one chart shows; `name` is its file name under assets/charts/."""

    kind: str  # "lines" | "dots" | "bars" | "history"
    title: str
    xlabel: str
    ylabel: str
    panels: dict[str, dict[str, list[tuple]]] = field(default_factory=dict)
    """panel title -> series label -> points: (x, ours, baseline) for lines, (case, ours, baseline) for
    dots and bars (the series label is then the case set), (run, ratio) for history."""
    baseline: str = ""
    references: list[tuple[str, float]] = field(default_factory=list)
    """Ceilings drawn across the chart, in its unit: (what, value)."""
    log: bool = False
    """A logarithmic value axis (times that span more than two decades)."""
    folded: bool = False
    """Shown behind a fold (the history of a probe's ratios), not open in the page."""

    @property
    def name(self) -> str:
        return hashlib.sha256(self.key().encode()).hexdigest()[:16] + ".svg"

    @property
    def dark_name(self) -> str:
        return self.name.removesuffix(".svg") + "-dark.svg"

    def key(self) -> str:
        return json.dumps([STYLE_VERSION, self.kind, self.title, self.xlabel, self.ylabel, self.panels,
                           self.baseline, self.references, self.log], sort_keys=True, default=str)


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
    """The measured ceiling of the case's kind, in its unit (value / fraction_of_ceiling)."""
    peak: float | None = None
    """The datasheet peak bounding the case, in its unit."""
    copy_ceiling: float | None = None
    copy_peak: float | None = None
    """The measured and the datasheet memory bandwidth (TB/s) of the record's GPU, for cases drawn in GB/s."""

    @property
    def shown(self) -> tuple[float | None, float | None]:
        return (self.value, self.baseline_value)


def _points(record: Record, cases: set[str] | None) -> list[Point]:
    out = []
    gpu = short_gpu_name((record.data.get("environment") or {}).get("gpu"))
    ceilings = record.data.get("ceilings") if isinstance(record.data.get("ceilings"), dict) else {}
    named = bool(ceilings.get("run_id") or ceilings.get("record"))   # quoted only from a calibration of the same run
    copy = float(ceilings["copy"]) if named and _number(ceilings.get("copy")) and ceilings["copy"] > 0 else None
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
                         copy, peak_for("TB/s", {}, gpu)[1]))
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


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


BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "tf32": 4, "e4m3": 1, "e5m2": 1, "fp8": 1, "int8": 1}
"""Bytes of one operand element, by a case's dtype: what a decode GEMM's bandwidth is counted in."""
BANDWIDTH = "GB/s"
TIME = "µs"


def _quantity(p: Point) -> tuple[str, float, float | None] | None:
    """(quantity, ours, baseline) a case is drawn in: GB/s for memory-bound cases (a bandwidth headline,
    or a GEMM of at most LATENCY_M rows, whose operands' bytes over its time are its speed), µs for a
    time, TFLOP/s for the other GEMMs, else the headline's own unit."""
    if p.value is None:
        return None
    base = p.baseline_value
    if p.unit in ("TB/s", "GB/s"):
        scale = 1000.0 if p.unit == "TB/s" else 1.0
        return BANDWIDTH, p.value * scale, None if base is None else base * scale
    if p.unit in TIME_UNITS:
        scale = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3}[p.unit]
        return TIME, p.value * scale, None if base is None else base * scale
    if p.unit == "TFLOP/s":
        mnk, size = _mnk(p.params), BYTES.get(str(p.params.get("dtype")))
        if mnk and size and mnk[0] <= LATENCY_M:
            m, n, k = mnk
            per_tflops = 1e12 / (2 * m * n * k) * (m * k + n * k) * size / 1e9
            return BANDWIDTH, p.value * per_tflops, None if base is None else base * per_tflops
    return p.unit, p.value, base


def _mnk(params: dict) -> tuple[int, int, int] | None:
    shape = _SHAPE.match(str(params.get("shape", "")))
    if shape:
        return int(shape.group(1)), int(shape.group(2)), int(shape.group(3))
    if all(_number(params.get(k)) for k in ("m", "n", "k")):
        return int(params["m"]), int(params["n"]), int(params["k"])
    return None


def _references(quantity: str, group: list[tuple[Point, float, float | None]]) -> list[tuple[str, float]]:
    """The ceilings drawn on a chart: the datasheet peak of each dtype (TFLOP/s) or of memory (GB/s), and
    the ceiling probe-calibration measured in the same invocation, where the record names it."""
    out: dict[str, float] = {}
    for p, _, _ in group:
        if quantity == "TFLOP/s":
            if p.peak:
                out[f"{p.params.get('dtype')} datasheet peak"] = p.peak
            if p.ceiling:
                out["measured ceiling (cuBLAS bf16 8192³)"] = p.ceiling
        elif quantity == BANDWIDTH:
            if p.unit in ("TB/s", "GB/s"):
                scale = 1000.0 if p.unit == "TB/s" else 1.0
                if p.peak:
                    out["datasheet memory bandwidth"] = p.peak * scale
                if p.ceiling:
                    out["measured copy ceiling"] = p.ceiling * scale
            else:
                if p.copy_peak:
                    out["datasheet memory bandwidth"] = p.copy_peak * 1000
                if p.copy_ceiling:
                    out["measured copy ceiling"] = p.copy_ceiling * 1000
    return sorted(out.items(), key=lambda kv: kv[1])


QUANTITY_ORDER = ("TFLOP/s", BANDWIDTH, TIME)


def quantity_charts(points: list[Point]) -> list[Chart]:
    """One chart per quantity (TFLOP/s, GB/s, µs, then any other unit) of every case given, ours and the
    baseline in the real quantity, with the datasheet and measured ceilings drawn: lines along a
    parameter every case varies (up to three panels of up to MAX_LINES lines), else a row per case
    grouped by case set. A quantity of one case gets no chart (its number is in the text and table)."""
    groups: dict[str, list[tuple[Point, float, float | None]]] = {}
    for p in points:
        drawn = _quantity(p)
        if drawn is not None:
            groups.setdefault(drawn[0], []).append((p, drawn[1], drawn[2]))
    charts = []
    for quantity in sorted(groups, key=lambda q: (QUANTITY_ORDER.index(q) if q in QUANTITY_ORDER else 9, q)):
        group = groups[quantity]
        if len(group) < 2 or (len({ours for _, ours, _ in group}) < 2 and all(base is None for _, _, base in group)):
            continue   # one case, or every case the same value with nothing beside it (0 errors, 0 hazards)
        baselines = sorted({p.baseline for p, _, base in group if base is not None})
        unit = {TIME: "µs per call (lower is better)", BANDWIDTH: "GB/s (A and B read, or bytes moved, ÷ time)"
                if any(p.unit == "TFLOP/s" for p, _, _ in group) else "GB/s"}.get(quantity, quantity)
        against = baselines[0] if len(baselines) == 1 else "the baseline timed in the same run"
        title = f"{quantity}: ours vs {against}" if baselines else f"{quantity} per case"
        refs = _references(quantity, group)
        lines = _lines(group, quantity)
        if lines is not None:
            axis, panels = lines
            charts.append(Chart("lines", title, axis, unit, panels, against if baselines else "", references=refs))
            continue
        usual = max(baselines, key=lambda b: sum(1 for p, _, base in group if p.baseline == b and base is not None),
                    default="")
        if len(baselines) > 1:
            title = f"{quantity}: ours vs {usual} (other baselines named on their rows)"
            against = usual
        rows: dict[str, list[tuple]] = {}
        for p, ours, base in group:
            label = p.case if base is None or p.baseline == usual else f"{p.case} · vs {p.baseline}"
            rows.setdefault(str(p.params.get("set") or ""), []).append((label, ours, base))
        charts.append(Chart("dots", title, "", unit, {"": rows}, against if baselines else "", references=refs,
                            log=quantity == TIME and _spread(group) > 100))
    return charts


def _spread(group: list[tuple[Point, float, float | None]]) -> float:
    values = [v for _, ours, base in group for v in (ours, base) if v is not None and v > 0]
    return max(values) / min(values) if values else 1.0


def _lines(group: list[tuple[Point, float, float | None]], quantity: str) -> tuple[str, dict] | None:
    """(axis, panels) when every case varies one parameter over three or more values and the lines fit
    (at most three panels of at most MAX_LINES lines, each line two points or more), else None."""
    points = [Point(p.case, p.params, p.ratio, p.baseline, ours, base, quantity) for p, ours, base in group]
    if len({p.baseline for p in points}) > 1:
        return None
    axis = _axis(points)
    if axis is None:
        return None
    panels = _series(points, *axis)
    if len(panels) > 3 or any(len(lines) > MAX_LINES or any(len(pts) < 2 for pts in lines.values())
                              for lines in panels.values()):
        return None
    return axis[0], panels


def case_charts(spec: ProbeSpec, record: Record, cases: set[str] | None) -> list[Chart]:
    """The charts of one record's cases (restricted to `cases`): one per quantity."""
    return quantity_charts(_points(record, cases))


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
                 {"": {case: repeated[case] for case in sorted(top)}}, folded=True)


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


def draw_all(charts: list[Chart], cache: Path) -> dict[str, str]:
    """file name -> SVG of the light and the dark version of every chart, each drawn once: from the
    cache, else drawn (in forked processes sharing the work when there are several to draw)."""
    unique = {chart.name: chart for chart in charts}
    out: dict[str, str] = {}
    todo = []
    usable = _usable(cache)
    for chart in unique.values():
        try:
            if not usable:
                raise UnsafeFile("no cache")
            out[chart.name] = read_regular(cache / chart.name, MAX_SVG_BYTES).decode("utf-8")
            out[chart.dark_name] = read_regular(cache / chart.dark_name, MAX_SVG_BYTES).decode("utf-8")
        except (UnsafeFile, UnicodeDecodeError):
            todo.append(chart)
    workers = min(os.cpu_count() or 1, 4)
    if len(todo) >= 4 and workers > 1 and _single_threaded():
        import multiprocessing

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot   # noqa: F401  (imported once, before the fork, for every worker)

        with multiprocessing.get_context("fork").Pool(workers) as pool:
            drawn = pool.map(_draw_light, todo, chunksize=1)
    else:
        drawn = [_draw_light(chart) for chart in todo]
    for chart, svg in zip(todo, drawn):
        for name, text in ((chart.name, svg), (chart.dark_name, _dark(svg))):
            out[name] = text
            if usable:
                try:
                    replace_file(cache / name, text.encode("utf-8"))
                except OSError:
                    pass  # a cache that cannot be written costs only a redraw next time
    return out


def _single_threaded() -> bool:
    from kernelwiki.storage.index import _single_threaded as single

    return single()


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
    # the series colours are Tableau's ten, distinguishable on both. The dark SVG is the light one with
    # these colours swapped (drawn once).
    "light": {"text": "#333333", "grid": "#999999"},
    "dark": {"text": "#e3e3e3", "grid": "#8a8a8a"},
}
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]
REFERENCE = "#8c564b"
"""The colour of the ceilings' dashed lines (a series colour no ours/baseline pair uses first)."""
ROW = 0.21
"""Inches per case row of a dots chart."""


def number(value: float) -> str:
    """A value as a reader reads it: three significant digits, thousands separated, never an exponent."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    digits = max(0, 2 - math.floor(math.log10(size)))
    return f"{value:,.{digits}f}"


def _draw(chart: Chart, scheme: str = "light") -> str:
    svg = _draw_light(chart)
    return _dark(svg) if scheme == "dark" else svg


def _dark(svg: str) -> str:
    """The dark version of a light SVG: its text and grid colours swapped for the dark scheme's."""
    for light, dark in zip(SCHEMES["light"].values(), SCHEMES["dark"].values()):
        svg = svg.replace(light, dark)
    return svg


def _text(value: object) -> str:
    """A label from a record as text: a `$` must not start TeX (shown as the full-width dollar sign)."""
    return str(value).replace("$", "\uff04")


def _draw_light(chart: Chart) -> str:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    ink, grid = SCHEMES["light"]["text"], SCHEMES["light"]["grid"]
    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "kernelwiki", "font.size": 10,
                         "text.color": ink, "axes.labelcolor": ink, "xtick.color": ink, "ytick.color": ink,
                         "axes.edgecolor": ink, "font.family": "sans-serif",
                         "text.parse_math": False})  # labels come from records: `$x$` is text, not TeX
    title, xlabel, ylabel = _text(chart.title), _text(chart.xlabel), _text(chart.ylabel)
    baseline = _fit(_text(chart.baseline), 44) or "baseline"
    ticks = FuncFormatter(lambda v, _: number(v))
    if chart.kind in ("dots", "bars"):
        fig, axes = _draw_rows(plt, chart, baseline, ink, grid)
    else:
        panels = [(name, lines) for name, lines in chart.panels.items() if lines] or [("", {})]
        height = 2.6 + 0.16 * max(len(lines) for _, lines in panels)
        fig, axes = plt.subplots(len(panels), 1, figsize=(6.4, height * len(panels)), squeeze=False, sharex=True)
        axes = [row[0] for row in axes]
        for number_, (ax, (name, lines)) in enumerate(zip(axes, panels)):
            _draw_lines(ax, chart, name, lines, baseline, ink, grid, legend=number_ == len(panels) - 1)
            ax.yaxis.set_major_locator(MaxNLocator(6))
            ax.yaxis.set_major_formatter(ticks)
        axes[-1].set_xlabel(xlabel)
        for ax in axes:
            ax.set_ylabel(ylabel)
    for ax in axes:
        ax.set_facecolor("none")
        ax.grid(True, color=grid, alpha=0.35, linewidth=0.5)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    out = io.StringIO()
    if chart.kind in ("dots", "bars"):   # laid out as drawn
        fig.savefig(out, format="svg", transparent=True, metadata={"Date": None})
    else:   # bbox_inches="tight": the legend below the axes is part of the SVG, never cut off
        axes[0].set_title(title, fontsize=10, color=ink, wrap=True, parse_math=False)
        fig.savefig(out, format="svg", transparent=True, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return out.getvalue()


def _legend(ax, handles: list, below: float) -> None:
    if handles:
        ax.legend(handles=handles, fontsize=8, frameon=False, loc="upper center", ncol=2, bbox_to_anchor=(0.5, below))


def _reference_lines(ax, chart: Chart, vertical: bool) -> list:
    from matplotlib.lines import Line2D

    handles = []
    for number_, (what, value) in enumerate(chart.references):
        style = (0, (5, 2)) if number_ % 2 == 0 else (0, (1, 1.5))
        (ax.axvline if vertical else ax.axhline)(value, color=REFERENCE, linewidth=1.0, linestyle=style)
        handles.append(Line2D([], [], color=REFERENCE, linewidth=1.0, linestyle=style,
                              label=_fit(f"{_text(what)}: {number(value)}", 48)))
    return handles


def _draw_rows(plt, chart: Chart, baseline: str, ink: str, grid: str):
    """A row per case, grouped by case set (a bold heading row each): ours a filled dot, the baseline an
    open diamond on the same row, ours' value and ratio written beside it."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

    sets = chart.panels.get("") or next(iter(chart.panels.values()), {})
    # A set of two or more cases gets a heading; the cases of the others stand together, last.
    groups = {name: points for name, points in sets.items() if len(points) > 1 and name}
    lone = [point for name, points in sets.items() if name not in groups for point in points]
    if lone:
        groups["other cases" if groups else ""] = lone
    rows: list[tuple[str, float | None, float | None, bool]] = []   # label, ours, baseline, heading
    for group in sorted(groups, key=lambda name: (name == "other cases", _natural(name))):
        if group:
            rows.append((_fit(_text(group), 40), None, None, True))
        for point in sorted(groups[group], key=lambda p: _natural(p[0])):
            ours, base = (list(point[1:]) + [None, None])[:2]
            rows.append((_fit(_text(point[0]), 34), ours, base, False))
    # A layout computed here, not found by drawing twice (bbox_inches="tight" halved the speed): room for
    # the longest row label on the left, the title above, the axis label and the legend below.
    handles_count = 1 + any(base is not None for _, _, base, _ in rows) + len(chart.references)
    left = 0.15 + 0.064 * max((len(label) for label, *_ in rows), default=0)
    top, bottom = 0.45, 0.55 + 0.2 * -(-handles_count // 2)
    height = top + ROW * len(rows) + 0.25 + bottom
    fig = plt.figure(figsize=(6.4, height))
    ax = fig.add_axes((left / 6.4, bottom / height, 1 - (left + 0.2) / 6.4, (ROW * len(rows) + 0.25) / height))
    fig.suptitle(_text(chart.title), y=1 - 0.12 / height, va="top", fontsize=10, color=ink, wrap=True)
    ys = list(range(len(rows)))[::-1]
    paired = any(base is not None for _, _, base, _ in rows)
    from matplotlib.collections import LineCollection

    drawn = [(y, ours, base) for y, (_, ours, base, heading) in zip(ys, rows) if not heading and ours is not None]
    # One collection per kind of mark (not one per row): drawing 60 rows costs what drawing 6 did.
    ax.add_collection(LineCollection([[(min(o, b), y), (max(o, b), y)] for y, o, b in drawn if b is not None],
                                     colors=grid, linewidths=1.0, zorder=1))
    paired_rows = [(y, b) for y, _, b in drawn if b is not None]
    if paired_rows:
        ax.scatter([b for _, b in paired_rows], [y for y, _ in paired_rows], marker="D", s=22, facecolors="none",
                   edgecolors=PALETTE[1], linewidths=1.2, zorder=3)
    ax.scatter([o for _, o, _ in drawn], [y for y, _, _ in drawn], marker="o", s=22, color=PALETTE[0], zorder=4)
    for y, ours, base in drawn:
        note = number(ours) + (f" ({ours / base:.2f}×)" if base else "")
        ax.annotate(note, (max(ours, base or 0), y), xytext=(6, 0), textcoords="offset points", va="center",
                    fontsize=7.5, color=ink)
    ax.set_yticks(ys, [label for label, *_ in rows], fontsize=7.5)
    for tick, (_, _, _, heading) in zip(ax.get_yticklabels(), rows):
        if heading:
            tick.set_fontweight("bold")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    values = [v for _, ours, base, _ in rows for v in (ours, base) if v is not None]
    values += [value for _, value in chart.references]
    if chart.log:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(numticks=6))
    else:
        ax.set_xlim(0, max(values) * 1.22 if values else 1)   # room for the value written after the last dot
        ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: number(v)))
    ax.set_xlabel(_text(chart.ylabel))
    handles = [Line2D([], [], color=PALETTE[0], marker="o", linestyle="none", label="ours")]
    if paired:
        handles.append(Line2D([], [], color=PALETTE[1], marker="D", markerfacecolor="none", linestyle="none",
                              label=baseline))
    handles += _reference_lines(ax, chart, vertical=True)
    fig.legend(handles=handles, fontsize=8, frameon=False, loc="lower center", ncol=2, bbox_to_anchor=(0.5, 0.02 / height))
    return fig, [ax]


def _draw_lines(ax, chart: Chart, panel: str, lines: dict, baseline: str, ink: str, grid: str,
                legend: bool = True) -> None:
    from matplotlib.lines import Line2D

    lines = {_fit(_text(name), 40): pts for name, pts in lines.items()}
    handles: list = []
    if chart.kind == "history":
        runs = sorted({x for pts in lines.values() for x, _ in pts})
        for i, (name, pts) in enumerate(lines.items()):
            ax.plot([runs.index(x) for x, _ in pts], [y for _, y in pts], marker="o", markersize=4, linewidth=1.5,
                    color=PALETTE[i % len(PALETTE)], label=name)
        ax.axhline(1.0, color=grid, linewidth=0.8, linestyle="--")
        shown = _thinned(list(range(len(runs))), [r for r in runs], 6)
        ax.set_xticks([i for i, _ in shown], [label for _, label in shown], rotation=30, ha="right", fontsize=8)
        _legend(ax, ax.get_legend_handles_labels()[0], -0.32)
        return
    for i, (name, pts) in enumerate(lines.items()):
        colour = PALETTE[i % len(PALETTE)]
        pts = [tuple(p) + (None,) * (3 - len(p)) for p in pts]
        xs = [x for x, *_ in pts]
        ax.plot(xs, [v for _, v, _ in pts], marker="o", markersize=4, linewidth=1.6, color=colour)
        if any(b is not None for _, _, b in pts):
            ax.plot(xs, [float("nan") if b is None else b for _, _, b in pts], marker="x", markersize=4,
                    linewidth=1.2, linestyle="--", color=colour)
        if len(lines) > 1:   # one series needs no colour key, only the ours/baseline key
            handles.append(Line2D([], [], color=colour, linewidth=2, label=name))
    ax.set_xscale("log", base=2)
    xs = sorted({x for pts in lines.values() for x, *_ in pts})
    shown = _thinned([math.log2(x) if x > 0 else 0 for x in xs], [number(x) for x in xs], 8)
    ax.set_xticks([2 ** x for x, _ in shown], [label for _, label in shown], fontsize=8)
    ax.minorticks_off()
    values = [v for pts in lines.values() for p in pts for v in p[1:3] if v is not None]
    ax.set_ylim(0, max(values + [value for _, value in chart.references]) * 1.06 if values else 1)
    if panel:
        ax.set_title(_fit(_text(panel), 40), loc="left", fontsize=8.5, fontweight="bold", color=ink)
    key = PALETTE[0] if len(lines) == 1 else ink
    handles += [Line2D([], [], color=key, linewidth=1.6, marker="o", label="ours")]
    if chart.baseline:
        handles.append(Line2D([], [], color=key, linewidth=1.2, linestyle="--", marker="x", label=baseline))
    handles += _reference_lines(ax, chart, vertical=False)
    if legend:
        _legend(ax, handles, -0.16)


def _thinned(positions: list[float], labels: list[str], most: int) -> list[tuple[float, str]]:
    """Tick labels far enough apart not to collide: at most `most`, none closer than 1/most of the span,
    the first and the last kept."""
    if len(positions) <= 2:
        return list(zip(positions, labels))
    span = (max(positions) - min(positions)) or 1.0
    kept = [(positions[0], labels[0])]
    for position, label in zip(positions[1:-1], labels[1:-1]):
        if position - kept[-1][0] >= span / most and positions[-1] - position >= span / most:
            kept.append((position, label))
    return kept + [(positions[-1], labels[-1])]


def _natural(value: object) -> list:
    return [(0, int(part), "") if part.isdigit() else (1, 0, part.lower())
            for part in re.split(r"(\d+)", str(value)) if part]


def page_charts(page_id: str, probes: dict[str, ProbeSpec], records: dict[str, list[Record]]) -> list[Chart]:
    """The charts of a page: one per quantity of the cases of its probes that concern it, and, folded,
    each probe's ratios run by run. Each case is drawn from the newest run in which it passed with a
    number, chosen per case as its claim is: a newer run of other cases (a `--case` run, a held-out-only
    run) hides none of the older ones. As the page's strip and the home page do, the charts take the
    run's cases whatever its control did (a control-too-blunt run is drawn; its claims are not made)."""
    points, history = [], []
    for spec in probes.values():
        if page_id not in spec.pages or not records.get(spec.id):
            continue
        order = list(dict.fromkeys(str(c.get("id")) for c in spec.data.get("cases") or []
                                   if isinstance(c, dict) and (not c.get("pages") or page_id in c["pages"])))
        cases = set(order)
        newest: dict[str, Point] = {}
        for record in records[spec.id]:   # oldest first: a newer run's point replaces an older one
            if record.mode == "run":
                newest.update((p.case, p) for p in _points(record, cases))
        points += [newest[case] for case in order if case in newest]
        chart = history_chart(spec, records[spec.id], cases)
        if chart is not None:
            history.append(chart)
    return quantity_charts(points) + history


LABEL_CHARS = 24
"""Longer labels (a baseline named by its whole pipeline, a long case id) are shortened with an
ellipsis: the tight bounding box grows with the longest label, and a chart must stay one phone-
readable panel (tests/test_site.py checks the width)."""


def _fit(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "\u2026"
