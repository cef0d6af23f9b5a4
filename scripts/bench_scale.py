#!/usr/bin/env python3
"""Speed at scale: copy the wiki into a temporary directory, add generated pages, and time the
commands an agent runs, each as a fresh process (Python start-up included).

    python scripts/bench_scale.py --pages 100000
    python scripts/bench_scale.py --pages 0 --site      # the site build: the wiki, then 7,000 pages

Targets on a 2-core machine at 100,000 pages: validate < 30 s (cold, building its cache, warm),
get < 0.2 s, query < 0.5 s (refresh and the first query, which builds the query index, are timed
too; they have no target). With --site: the site built from a fresh copy (no chart cache, as a
fresh clone has none) of the wiki (< 15 s) and of the wiki with --site-pages generated pages
(< 120 s).
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TYPES = [("hardware", "hw-", "hardware"), ("kernel", "kernel-", "kernels"), ("technique", "technique-", "techniques"),
         ("footgun", "footgun-", "footguns"), ("language", "lang-", "languages")]
TAGS = ["wgmma", "tma", "gemm", "fp8", "attention", "tcgen05", "tmem", "swizzling", "cute-dsl", "hopper"]
WORDS = ("warpgroup tensor memory pipeline stage barrier shared register accumulator epilogue tile cluster "
         "multicast swizzle scale block quantization softmax exponent latency throughput bandwidth").split()


def generate(wiki: Path, count: int, rng: random.Random) -> None:
    ids = [f"{prefix}gen-{i:05d}" for i in range(count) for _, prefix, _ in [TYPES[i % len(TYPES)]]]
    for i, page_id in enumerate(ids):
        page_type, prefix, section = TYPES[i % len(TYPES)]
        related = "\n".join(f"- {ids[j]}" for j in rng.sample(range(count), 3) if j != i)
        tags = "\n".join(f"- {t}" for t in rng.sample(TAGS, 3))
        body = "\n\n".join(" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(6))
        symptom = "symptom: The generated kernel silently computes the wrong tile.\n" if page_type == "footgun" else ""
        text = f"""---
id: {page_id}
title: Generated page {i} about {rng.choice(WORDS)} and {rng.choice(WORDS)}
type: {page_type}
status: draft
evidence_level: source-reported
summary: A generated page used to measure the tools at scale.
{symptom}architectures:
- sm_90a
tags:
{tags}
related:
{related}
sources:
- src-ptx-isa
claims:
- id: c{i}
  metric: tflops
  value: {rng.uniform(100, 900):.1f}
  unit: TFLOP/s
  gpu: H200-SXM
  arch: sm_90a
  dtype: bf16
  shape: 4096x4096x4096
  evidence: source-reported
  source: src-ptx-isa
  locator: facts[3]
  quote: wgmma and setmaxnreg need the architecture-specific target sm_90a.
---
# Generated page {i}

{body}
"""
        path = wiki / section / f"{page_id[len(prefix):]}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def copy_wiki(root: Path) -> None:
    for name in ("schemas", "wiki", "probes", "artifacts"):   # the real wiki whole, so that it validates
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))


def timed(root: Path, *args: str, repeat: int = 1) -> tuple[float, int]:
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        code = subprocess.run([sys.executable, "-m", "kernelwiki", *args, "--root", str(root)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT).returncode
        times.append(time.perf_counter() - start)
    return statistics.median(times), code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=2000, help="generated pages to add (default 2000; 0: no lookups)")
    parser.add_argument("--repeat", type=int, default=5, help="runs per lookup command (median reported)")
    parser.add_argument("--site", action="store_true", help="also time the docs site build (the wiki, and --site-pages)")
    parser.add_argument("--site-pages", type=int, default=7000, help="generated pages of the larger site build")
    args = parser.parse_args()
    # Byte-compile once, as an install does: with PYTHONDONTWRITEBYTECODE set, every run would
    # otherwise recompile the package and the numbers would measure the compiler.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "kernelwiki")], check=True)
    rows = []
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "wiki-copy"
        copy_wiki(root)
        generate(root / "wiki", args.pages, random.Random(0))
        total = sum(1 for _ in (root / "wiki").rglob("*.md"))
        for label, argv, repeat, limit in (
            ("validate (cold, no cache)", ("validate", "--no-cache"), 1, 30.0),
            ("validate (builds cache)", ("validate",), 1, 30.0),
            ("validate (warm cache)", ("validate",), args.repeat, 30.0),
            ("get_page by id", ("get", "hw-wgmma"), args.repeat, 0.2),
            ("get_page by alias", ("get", "skill-wgmma", "--claims"), args.repeat, 0.2),
            ("query, first (builds query index)", ("query", "warpgroup", "pipeline"), 1, float("inf")),
            ("query 'warpgroup pipeline'", ("query", "warpgroup", "pipeline"), args.repeat, 0.5),
            ("query 'tma multicast barrier'", ("query", "tma", "multicast", "barrier"), args.repeat, 0.5),
            ("query --arch H100 --tag fp8", ("query", "--arch", "H100", "--tag", "fp8"), args.repeat, 0.5),
            ("refresh --check", ("refresh", "--check"), 1, float("inf")),
        ) if args.pages else ():
            seconds, code = timed(root, *argv, repeat=repeat)
            rows.append((label, seconds, limit, code))
    if args.site:
        for pages, limit in ((0, 15.0), (args.site_pages, 120.0)):
            with tempfile.TemporaryDirectory() as tmp:
                root = Path(tmp) / "site-copy"
                copy_wiki(root)
                generate(root / "wiki", pages, random.Random(0))
                for name in ("mkdocs.yml", "kernelwiki"):
                    (root / name).symlink_to(ROOT / name)
                count = sum(1 for _ in (root / "wiki").rglob("*.md"))
                seconds, code = timed(root, "site", "build", "--out", str(Path(tmp) / "site-out"))
                rows.append((f"site build, {count} pages (fresh)", seconds, limit, code))
    print(f"{total} pages ({args.pages} generated), median of {args.repeat} runs for lookups, Python start-up included")
    print(f"{'command':<32} {'seconds':>8} {'target':>8}  ok")
    failed = False
    for label, seconds, limit, code in rows:
        ok = seconds < limit and (code == 0 or code == 1 and label.startswith(("validate", "refresh")))
        failed |= not ok
        target = f"{limit:>8.1f}" if limit != float("inf") else f"{'-':>8}"
        print(f"{label:<32} {seconds:>8.3f} {target}  {'yes' if ok else 'NO'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
