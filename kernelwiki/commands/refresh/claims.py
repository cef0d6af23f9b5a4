"""Claims derived from run records: one `measured` claim per passing case of a probe's latest run
on each architecture (with the reproduction of another kernel's reported value, where a case says
`reproduced_by`), and one `compiled` claim per architecture a compile-only record found the
expected instructions for. The claims carry the record and case they come from.
"""

from __future__ import annotations

import re
from typing import Any

from kernelwiki.harness.env import short_gpu_name
from kernelwiki.model.vocab import Vocabulary
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record

def measured_claims(spec: ProbeSpec, record: Record, page_id: str, hand_ids: set, vocab: Vocabulary) -> list[dict]:
    env = record.data.get("environment") or {}
    claims = []
    for case in record.data.get("cases") or []:
        headline = case.get("headline") or {}
        case_spec = spec.case(case.get("id", "")) or {}
        if case.get("status") != "passed" or "value" not in headline:
            continue
        if isinstance(case_spec.get("pages"), list) and page_id not in case_spec["pages"]:   # [] = on no page
            continue
        params = dict(case.get("params") or {})
        claim: dict[str, Any] = {
            "id": f"measured.{spec.id.removeprefix('probe-')}.{case['id']}",
            "metric": headline["metric"], "value": headline["value"],
        }
        if headline.get("unit"):
            claim["unit"] = headline["unit"]
        claim.update(gpu=short_gpu_name(env.get("gpu")), arch=str(record.arch))
        dtype = params.pop("dtype", None)
        if isinstance(dtype, str) and dtype in vocab.dtypes:
            claim["dtype"] = dtype
        if params.get("shape"):
            claim["shape"] = str(params.pop("shape"))
        params.pop("ceiling", None)
        params.update({k: v for k, v in (case.get("metrics") or {}).items() if v is not None})
        if params:
            claim["conditions"] = ", ".join(f"{k}={_short(v)}" for k, v in params.items())
        claim.update(evidence="measured", record=record.path, case=case["id"])
        if case_spec.get("claim") in hand_ids:
            claim["reproduces"] = case_spec["claim"]
            if isinstance(case_spec.get("comparable"), bool):
                claim["comparable"] = case_spec["comparable"]
        if "baseline" in headline and "baseline_value" in headline:
            claim["baseline"] = {"name": headline["baseline"], "value": headline["baseline_value"]}
            claim["ratio"] = headline["ratio"]
        for key in ("fraction_of_peak", "fraction_of_ceiling"):
            if key in headline:
                claim[key] = headline[key]
        claim["measured_at"] = record.started
        claims.append(claim)
        reproduction = candidate_claim(claim, case, case_spec, hand_ids)
        if reproduction is not None:
            claims.append(reproduction)
    return claims


def candidate_claim(ours: dict, case: dict, case_spec: dict, hand_ids: set) -> dict | None:
    """For a case whose reported claim is another kernel's (case spec `reproduced_by`, e.g. DeepGEMM
    timed as a baseline): that kernel's value in the same run, as the claim's comparable reproduction.
    Our own kernel's claim stays beside it, without a ratio to the reported value."""
    name = case_spec.get("reproduced_by")
    if not name:
        return None
    value = next((b.get("value") for b in case.get("baselines") or []
                  if isinstance(b, dict) and b.get("name") == name), None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None   # the candidate did not run (skipped with its reason in the record)
    ours.pop("comparable", None)
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    claim = {key: ours[key] for key in ("metric", "unit", "gpu", "arch", "dtype", "shape") if key in ours}
    params = {k: v for k, v in (case.get("params") or {}).items() if k not in ("dtype", "shape", "ceiling")}
    claim["conditions"] = ", ".join([f"{name}, timed in the same run and on the same inputs as ours",
                                     *(f"{k}={_short(v)}" for k, v in params.items())])
    out = {"id": f"{ours['id']}.{slug}", **claim, "value": value, "candidate": name, "evidence": "measured",
           "record": ours["record"], "case": ours["case"]}
    if case_spec.get("claim") in hand_ids:   # on the page that holds the reported claim: its reproduction
        out.update(reproduces=case_spec["claim"], comparable=True)
    out["measured_at"] = ours["measured_at"]
    return out


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def compiled_claim(spec: ProbeSpec, record: Record, arch: str) -> dict:
    found = (record.data.get("instructions") or {}).get(arch, {}).get("found", [])
    return {"id": f"compiled.{spec.id.removeprefix('probe-')}.{arch}", "metric": "instructions-found",
            "value": ", ".join(found), "arch": arch, "evidence": "compiled", "record": record.path,
            "measured_at": record.started}
