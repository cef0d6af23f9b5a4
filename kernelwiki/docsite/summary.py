"""What a kernel's run says in one line: per case set, the geometric mean and the worst case of ours
over the strongest baseline, from the latest passing run of each kernel probe.

A best case is never a headline: the home page and the first screen of a kernel page show the
geomean and the worst case of every set (the held-out set included), each against the baseline the
probe's headline names (the strongest one timed in the same run). A teaching variant (a probe or a
set named so) is labelled as such, never shown as the kernel.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest
from kernelwiki.docsite.render import is_number

_VARIANT = re.compile(r"\b(teaching|naive)\b", re.I)


@dataclass(frozen=True)
class CaseRatio:
    case: str
    ratio: float
    value: float
    unit: str
    baseline: str
    baseline_value: float | None


@dataclass(frozen=True)
class SetSummary:
    """One case set of one run: geomean and worst ratio to the strongest baseline."""

    probe: str
    name: str
    variant: bool
    cases: tuple[CaseRatio, ...]

    @property
    def geomean(self) -> float:
        return math.exp(sum(math.log(c.ratio) for c in self.cases) / len(self.cases))

    @property
    def worst(self) -> CaseRatio:
        return min(self.cases, key=lambda c: (c.ratio, c.case))

    @property
    def baselines(self) -> list[str]:
        return sorted({c.baseline for c in self.cases})


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
        base_value = head.get("baseline_value")
        groups.setdefault(str(params.get("set") or ""), []).append(CaseRatio(
            str(case.get("id")), float(head["ratio"]), float(head["value"]), str(head.get("unit")),
            str(head.get("baseline") or "baseline"), float(base_value) if is_number(base_value) else None))
    variant = is_variant(spec)
    return [SetSummary(spec.id, name, variant or bool(_VARIANT.search(name)), tuple(group))
            for name, group in groups.items()]


def overall(summaries: list[SetSummary]) -> SetSummary | None:
    """Every case of the sets that are the kernel itself (no teaching variant), as one set."""
    cases = tuple(c for s in summaries if not s.variant for c in s.cases)
    return SetSummary(summaries[0].probe, "all sets", False, cases) if cases else None


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
