"""The frontmatter fields refresh manages: the record-backed claims, `evidence_by_arch`,
`evidence_level`, `status`, `measured_on` and `last_measured`, placed where they stood so that a
rewrite moves nothing else.
"""

from __future__ import annotations

from typing import Any

from kernelwiki.commands.refresh.claims import case_evidence, compiled_claim, measured_claims
from kernelwiki.commands.refresh.status import page_status
from kernelwiki.harness.env import is_fake, short_gpu_name
from kernelwiki.model.claims import RECORD_LEVELS
from kernelwiki.model.vocab import Vocabulary
from kernelwiki.probing.specs import ProbeSpec
from kernelwiki.storage.records import Record, latest_by

LEVELS = ["spec", "source-reported", "compiled", "measured"]
MANAGED_ORDER = ("status", "evidence_level", "evidence_by_arch", "measured_on", "last_measured")


def implied_meta(meta: dict, vocab: Vocabulary, probes: dict[str, ProbeSpec], records: dict[str, list[Record]],
                 settings: dict, newest: str) -> dict:
    page_id = meta.get("id")
    linked = [probes[p] for p in meta.get("probes") or [] if isinstance(p, str) and p in probes]
    hand_claims = [c for c in meta.get("claims") or [] if not (isinstance(c, dict) and c.get("evidence") in RECORD_LEVELS)]
    hand_ids = {c.get("id") for c in hand_claims if isinstance(c, dict)}
    record_claims: list[dict] = []
    used: dict[str, Record] = {}
    run_archs: set[str] = set()
    compiled_archs: set[str] = set()
    for spec in linked:
        probe_records = records.get(spec.id, [])
        # Records made under KERNELWIKI_FAKE_GPU are test fixtures, never measurements.
        real = [r for r in probe_records if not is_fake(r.data.get("environment"))]
        passing = [r for r in real if r.mode == "run" and r.status == "passed"]
        for (arch, _), pairs in case_evidence(spec, passing, page_id).items():
            run_archs.add(arch)
            for record, _ in pairs:
                used.setdefault(record.path, record)
            record_claims += measured_claims(spec, pairs, hand_ids, vocab)
        for arch, record in latest_by(probe_records, Record.archs, mode="compile-only").items():
            if record.status == "compiled" and arch not in run_archs:
                compiled_archs.add(str(arch))
                used.setdefault(record.path, record)
                record_claims.append(compiled_claim(spec, record, str(arch)))
    claims = hand_claims + sorted(record_claims, key=lambda c: c["id"])

    archs = [a for a in meta.get("architectures") or [] if isinstance(a, str)]
    by_arch = {}
    for arch in archs:
        canonical = vocab.canonical_arch(arch)
        if canonical in run_archs:
            by_arch[arch] = "measured"
        elif canonical in compiled_archs:
            by_arch[arch] = "compiled"
        else:
            by_arch[arch] = _hand_level(hand_claims, canonical, vocab)

    managed: dict[str, Any] = {"status": page_status(linked, records, claims, list(used.values()), settings, newest,
                                                     meta.get("goals"))}
    if archs:
        managed["evidence_level"] = by_arch[archs[0]]
        managed["evidence_by_arch"] = by_arch
    runs = [r for r in used.values() if r.data.get("mode") == "run"]
    if runs:
        latest = max(runs, key=lambda r: r.started)
        managed["measured_on"] = measured_on(latest.data)
        managed["last_measured"] = latest.started
    out = {k: v for k, v in meta.items() if k not in (*MANAGED_ORDER, "claims")}
    out = _insert_after(out, "type", {k: v for k, v in managed.items() if k in ("status", "evidence_level", "evidence_by_arch")})
    position = "evidence_by_arch" if "evidence_by_arch" in out else "type"
    out = _insert_after(out, position, {k: managed[k] for k in ("measured_on", "last_measured") if k in managed})
    if claims or "claims" in meta:
        out = _place_like(meta, out, "claims", claims)
    return out


def _insert_after(meta: dict, anchor: str, items: dict) -> dict:
    """Insert keys right after `anchor` (or at the end), keeping every other key where it was."""
    if not items:
        return meta
    out: dict = {}
    for key, value in meta.items():
        out[key] = value
        if key == anchor:
            out.update(items)
    if anchor not in meta:
        out.update(items)
    return out


def _place_like(original: dict, meta: dict, key: str, value: Any) -> dict:
    """Put `key` where it stood in the original mapping (after the same predecessor), else at the end."""
    keys = list(original)
    if key in keys:
        before = [k for k in keys[:keys.index(key)] if k in meta]
        if before:
            return _insert_after(meta, before[-1], {key: value})
    return {**meta, key: value}


def _hand_level(claims: list, arch: str, vocab: Vocabulary) -> str:
    levels = [c.get("evidence") for c in claims if isinstance(c, dict) and c.get("evidence") in LEVELS
              and (c.get("arch") is None or vocab.canonical_arch(str(c.get("arch"))) == arch)]
    return max(levels, key=LEVELS.index) if levels else "spec"


def measured_on(record: dict) -> str:
    env = record.get("environment") or {}
    return (f"{short_gpu_name(env.get('gpu'))} | {env.get('arch')} | CUDA {env.get('cuda_runtime')} | "
            f"driver {env.get('driver')} | cutlass-dsl {env.get('cutlass_dsl')} | torch {env.get('torch')}")
