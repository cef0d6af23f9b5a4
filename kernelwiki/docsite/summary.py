"""What a kernel's run says in one line: per case set and per baseline, the geometric mean and the
worst case of ours over that baseline, from the latest passing run of each kernel probe.

A best case is never a headline: the home page and the first screen of a kernel page show the
geomean and the worst case (with its shape), each against the baseline the cases' headlines name
(the strongest one timed in the same run). An aggregate never mixes baselines: cases whose headline
is against FlashMLA and cases where only torch ran are two geomeans, each naming its baseline
(`Aggregate` refuses anything else). A case whose headline is itself a geomean over shapes (the
held-out set's) is shown as it is, never averaged again. A teaching variant (a probe or a set named
so) is labelled as such, never shown as the kernel.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest
from kernelwiki.docsite.render import fmt_ratio, is_number, text

_VARIANT = re.compile(r"\b(teaching|naive)\b", re.I)


@dataclass(frozen=True)
class CaseRatio:
    case: str
    ratio: float
    value: float
    unit: str
    baseline: str
    baseline_value: float | None
    shape: str = ""
    aggregate: bool = False
    """The case's headline is itself a geomean over shapes (metrics.headline_statistic)."""
    shapes: int | None = None
    """How many shapes such a case's geomean is over (metrics.shapes)."""
    worst_ratio: float | None = None
    """A geomean case's lowest per-shape ratio, where its metrics hold it (geomean_of_shapes_worst)."""
    worst_shape: str = ""
    """The shape of that lowest ratio, where its per-shape list names it."""

    @property
    def label(self) -> str:
        """The case id, and its shape where that says more."""
        return self.case if not self.shape or self.shape in self.case else f"{self.case} ({self.shape})"


@dataclass(frozen=True)
class Aggregate:
    """One geomean over cases that share one baseline: ours / `baseline`, case by case."""

    probe: str
    name: str
    baseline: str
    variant: bool
    cases: tuple[CaseRatio, ...]

    def __post_init__(self) -> None:
        if not self.cases:
            raise ValueError(f"an aggregate of {self.probe} {self.name!r} needs at least one case")
        others = sorted({c.baseline for c in self.cases} - {self.baseline})
        if others:
            raise ValueError(f"an aggregate of {self.probe} {self.name!r} against {self.baseline!r} holds cases "
                             f"against {', '.join(map(repr, others))}: one geomean per baseline, never mixed")
        nested = [c.case for c in self.cases if c.aggregate]
        if nested and len(self.cases) > 1:
            raise ValueError(f"an aggregate of {self.probe} {self.name!r} averages the geomean case(s) "
                             f"{', '.join(nested)} with other cases")

    @property
    def geomean(self) -> float:
        return math.exp(sum(math.log(c.ratio) for c in self.cases) / len(self.cases))

    @property
    def worst(self) -> CaseRatio:
        return min(self.cases, key=lambda c: (c.ratio, c.case))

    def html(self) -> str:
        """The aggregate in words, in one `kw-agg` element that names its one baseline (the site
        test reads every geomean on every page through it): the geomean, how many cases, the worst
        case and its shape; a case that is itself a geomean says over how many shapes, and whose."""
        open_tag = f'<span class="kw-agg" data-baseline="{text(self.baseline)}">'
        only = self.cases[0]
        if len(self.cases) == 1 and not only.aggregate:
            return f"{open_tag}<b>{fmt_ratio(only.ratio)}</b> vs {text(self.baseline)} (1 case: <code>{text(only.label)}</code>)</span>"
        head = f"{open_tag}geomean <b>{fmt_ratio(self.geomean)}</b> vs {text(self.baseline)}"
        if only.aggregate:
            over = f" over {only.shapes} shapes" if only.shapes else ""
            worst = ""
            if only.worst_ratio is not None:
                shape = f" <code>{text(only.worst_shape)}</code>" if only.worst_shape else ""
                worst = f"; worst <b>{fmt_ratio(only.worst_ratio)}</b>{shape}"
            return (f'{head}{over}{worst} <span class="kw-note">(the probe\'s own geomean: '
                    f'<code>{text(only.case)}</code>)</span></span>')
        worst = self.worst
        return (f"{head} over {len(self.cases)} cases; worst <b>{fmt_ratio(worst.ratio)}</b> "
                f"<code>{text(worst.label)}</code></span>")


def per_baseline(probe: str, name: str, variant: bool, cases: list[CaseRatio]) -> list[Aggregate]:
    """`cases` as one Aggregate per baseline (most cases first), a geomean case always on its own."""
    groups: dict[tuple[str, str], list[CaseRatio]] = {}
    for case in cases:
        groups.setdefault((case.baseline, case.case if case.aggregate else ""), []).append(case)
    out = [Aggregate(probe, name, baseline, variant, tuple(group)) for (baseline, _), group in groups.items()]
    return sorted(out, key=lambda a: (a.cases[0].aggregate, -len(a.cases), a.baseline))


@dataclass(frozen=True)
class SetSummary:
    """One case set of one run: its cases, summarised per baseline."""

    probe: str
    name: str
    variant: bool
    cases: tuple[CaseRatio, ...]

    @property
    def aggregates(self) -> list[Aggregate]:
        return per_baseline(self.probe, self.name, self.variant, list(self.cases))


def is_variant(spec: ProbeSpec) -> bool:
    """A probe of a teaching (or naive) variant of a kernel, not the kernel itself."""
    return bool(_VARIANT.search(str(spec.data.get("title") or "")) or spec.id.endswith("-naive"))


def page_cases(spec: ProbeSpec, page_id: str | None) -> set[str] | None:
    """The case ids of a probe that concern a page (None: all of them)."""
    if page_id is None:
        return None
    return {str(c.get("id")) for c in spec.data.get("cases") or []
            if isinstance(c, dict) and (not c.get("pages") or page_id in c["pages"])}


def set_summaries(spec: ProbeSpec, record: Record, cases: set[str] | None = None) -> list[SetSummary]:
    """The run's passing throughput cases with a positive ratio, grouped by `params.set`, in record order."""
    groups: dict[str, list[CaseRatio]] = {}
    for case in record.data.get("cases") or []:
        if not isinstance(case, dict) or case.get("status") != "passed":
            continue
        if cases is not None and str(case.get("id")) not in cases:
            continue
        head = case.get("headline") or {}
        if not (is_number(head.get("ratio")) and head["ratio"] > 0 and is_number(head.get("value"))
                and str(head.get("unit", "")).endswith("/s")):
            continue
        params = case.get("params") if isinstance(case.get("params"), dict) else {}
        metrics = case.get("metrics") if isinstance(case.get("metrics"), dict) else {}
        base_value = head.get("baseline_value")
        aggregate = str(metrics.get("headline_statistic") or "").startswith("geomean")
        worst_ratio, worst_shape = geomean_of_shapes_worst(metrics, float(head["ratio"])) if aggregate else (None, "")
        groups.setdefault(str(params.get("set") or ""), []).append(CaseRatio(
            str(case.get("id")), float(head["ratio"]), float(head["value"]), str(head.get("unit")),
            str(head.get("baseline") or "baseline"), float(base_value) if is_number(base_value) else None,
            str(params.get("shape") or ""), aggregate,
            metrics["shapes"] if isinstance(metrics.get("shapes"), int) and not isinstance(metrics["shapes"], bool) else None,
            worst_ratio, worst_shape))
    variant = is_variant(spec)
    return [SetSummary(spec.id, name, variant or bool(_VARIANT.search(name)), tuple(group))
            for name, group in groups.items()]


_SHAPE = re.compile(r"\d+(?:x\d+){1,3}")
_RATIO = re.compile(r"(?<![\w.])\d+\.\d{3}(?![\w.])")


def geomean_of_shapes_worst(metrics: dict, geomean: float) -> tuple[float | None, str]:
    """The lowest per-shape ratio of a case whose headline is a geomean over shapes, and its shape:
    `worst_ratio`, or `<chooser>_worst_ratio` of the chooser whose `<chooser>_geomean_ratio` is the
    headline's ratio (a held-out case times several choosers); the shape is the first of
    `per_shape`'s entries ("SHAPE ... RATIO ...", "; "-separated) whose first ratio is that worst.
    (None, "") where the metrics hold no such figure: a summary never guesses one."""
    worst = metrics.get("worst_ratio")
    if not is_number(worst):
        worst = next((metrics.get(f"{key[:-len('_geomean_ratio')]}_worst_ratio") for key, value in metrics.items()
                      if isinstance(key, str) and key.endswith("_geomean_ratio") and "_class_" not in key
                      and is_number(value) and abs(float(value) - geomean) <= 5e-4), None)
    if not is_number(worst) or float(worst) <= 0:
        return None, ""
    worst = float(worst)
    entries = str(metrics.get("per_shape") or "").split("; ")
    for entry in entries:
        shape, ratio = _SHAPE.match(entry), _RATIO.search(entry)
        if shape and ratio and abs(float(ratio.group()) - worst) <= 6e-4:
            return worst, shape.group()
    return worst, ""


def overall(summaries: list[SetSummary]) -> list[Aggregate]:
    """Every case of the sets that are the kernel itself (no teaching variant), one Aggregate per
    baseline; the variant's sets the same way when the probe has nothing else."""
    kernel = [c for s in summaries if not s.variant for c in s.cases]
    if kernel:
        return per_baseline(summaries[0].probe, "all sets", False, kernel)
    every = [c for s in summaries for c in s.cases]
    return per_baseline(summaries[0].probe, "all sets", True, every) if every else []


def kernel_runs(probes: dict[str, ProbeSpec], records: dict[str, list[Record]],
                page_id: str | None = None) -> list[tuple[ProbeSpec, Record, list[SetSummary]]]:
    """Each kernel probe (of a page, when given) with its latest run and that run's set summaries."""
    out = []
    for spec in probes.values():
        if spec.kind != "kernel" or (page_id is not None and page_id not in spec.pages):
            continue
        record = latest(records.get(spec.id, []), mode="run", with_cases=True)
        if record is None:
            continue
        summaries = set_summaries(spec, record, page_cases(spec, page_id))
        if summaries:
            out.append((spec, record, summaries))
    return out
