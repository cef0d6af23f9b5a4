"""The `kernelwiki` command: validate, get, query, refresh, site, probe, records, mcp."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from kernelwiki.faces import arguments
from kernelwiki.faces.arguments import ArgumentError
from kernelwiki.storage.repo import NotARepo, OutsideRepo, Repo


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except BrokenPipeError:
        return 0
    except (NotARepo, ArgumentError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C in any other command: writes are atomic, nothing is half done
        print("interrupted", file=sys.stderr)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kernelwiki", description="GPU kernel knowledge base backed by probes.")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", help="repository root (default: found from the current directory)")
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("validate", parents=[common], help="check pages, probes, provenance and records")
    add_validate_arguments(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("get", parents=[common], help="print one page (by id, alias or path)")
    add_get_arguments(p)
    p.set_defaults(func=cmd_get)

    p = sub.add_parser("query", parents=[common], help="search pages")
    add_query_arguments(p)
    p.set_defaults(func=cmd_query)

    p = sub.add_parser("refresh", parents=[common], help="rewrite the managed parts of the pages from the run records")
    p.add_argument("--check", action="store_true", help="change nothing; exit 1 if any page differs from what the records imply")
    p.set_defaults(func=cmd_refresh)

    p = sub.add_parser("audit", parents=[common], help="find performance numbers in prose that no claim span backs")
    p.add_argument("--sources", action="store_true",
                   help="instead: check the quotes of spec and source-reported claims against the pinned upstream files")
    p.add_argument("--wheels", action="append", default=None, metavar="DIR",
                   help="--sources: a directory of downloaded wheels (repeatable; default $KERNELWIKI_WHEELS)")
    p.add_argument("--mirror", action="append", default=None, metavar="DIR",
                   help="--sources: a directory of git mirrors <owner>+<name>/repo (repeatable; default $KERNELWIKI_MIRRORS)")
    p.add_argument("--references", action="append", default=None, metavar="DIR",
                   help="--sources: a directory of files the project was given (repeatable; default $KERNELWIKI_REFERENCES)")
    p.set_defaults(func=cmd_audit)

    site = sub.add_parser("site", help="build or serve the docs site").add_subparsers(dest="site_command")
    p = site.add_parser("build", parents=[common], help="mkdocs build --strict into site/ (or --out)")
    p.add_argument("--out", help="output directory (default: site/)")
    p.set_defaults(func=cmd_site_build)
    p = site.add_parser("serve", parents=[common], help="serve the site with live reload")
    p.add_argument("--address", default="127.0.0.1:8000", help="host:port (default 127.0.0.1:8000)")
    p.set_defaults(func=cmd_site_serve)

    probe = sub.add_parser("probe", help="list, show and run probes").add_subparsers(dest="probe_command")
    p = probe.add_parser("list", parents=[common], help="every probe with its latest record")
    p.add_argument("--json", action="store_true", help="machine-readable output (schemas/output/probe-list.v1)")
    p.set_defaults(func=cmd_probe_list)
    p = probe.add_parser("show", parents=[common], help="one probe's spec and latest record")
    p.add_argument("probe_id")
    p.add_argument("--json", action="store_true", help="machine-readable output (schemas/output/probe-show.v1)")
    p.set_defaults(func=cmd_probe_show)
    p = probe.add_parser("record", parents=[common],
                         help="one run record whole: protocol, timings, clocks, correctness, environment")
    p.add_argument("probe_id")
    p.add_argument("--record", help="artifacts/evidence/<probe>/<run>.json.gz or <run>.json.gz (.json also names "
                                    "the run; default: the newest)")
    p.add_argument("--case", help="only this case")
    p.add_argument("--json", action="store_true", help="machine-readable output (schemas/output/record.v1)")
    p.set_defaults(func=cmd_probe_record)
    p = probe.add_parser("run", parents=[common], help="run probes and write run records")
    add_run_arguments(p)
    p.set_defaults(func=cmd_probe_run)

    records = sub.add_parser("records", help="run record files").add_subparsers(dest="records_command")
    p = records.add_parser(
        "compress", parents=[common], help="convert every .json run record to .json.gz and rewrite the references",
        description="Convert every artifacts/evidence/<probe>/<run>.json to <run>.json.gz (the form the runner "
                    "writes; the text inflated is the same) and rewrite every reference to it: the claims' record "
                    "paths in wiki/ frontmatter, and the ceilings.record path inside other records (where their "
                    "ceilings were read: a path, not evidence; no measured value changes). Idempotent; prints what "
                    "it did; refuses symbolic links and paths outside the repository.")
    p.set_defaults(func=cmd_records_compress)

    p = sub.add_parser("mcp", parents=[common], help="serve the lookups to coding agents over MCP (stdio)")
    p.set_defaults(func=cmd_mcp)
    return parser


def _repo(args) -> Repo:
    return Repo.at(args.root) if getattr(args, "root", None) else Repo.find()


def _print_json(document: dict | None, where: str = "") -> int:
    """Standard JSON on stdout (0), or a message naming the NaN/infinity that prevents it (1)."""
    from kernelwiki.faces.output import NotJson, dumps

    try:
        sys.stdout.write(dumps(document))
    except NotJson as err:
        print(f"error: {where}{err}", file=sys.stderr)
        return 1
    return 0


# --- validate ------------------------------------------------------------------------------------
def add_validate_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fix", action="store_true", help="rewrite frontmatter into canonical form (BOM, CRLF, layout)")
    p.add_argument("--format", choices=("text", "json"), default="text", dest="fmt")
    p.add_argument("--no-cache", action="store_true", help="ignore and do not write .kernelwiki-cache/")


def cmd_validate(args) -> int:
    from kernelwiki.storage.index import Wiki
    from kernelwiki.commands.validate import page_problems, validate

    wiki = Wiki.load(_repo(args), use_cache=not args.no_cache, verify=True, check=page_problems)
    report = validate(wiki, fix=args.fix)
    for rel in report.fixed:
        print(f"fixed: {rel}", file=sys.stderr)
    if args.fmt == "json":
        from kernelwiki.faces.output import validate_document

        code = _print_json(validate_document(report))
        return code or (0 if report.ok else 1)
    else:
        for problem in report.problems:
            print(problem)
        print(f"{report.pages} pages, {report.probes} probes, {report.provenance} provenance files, "
              f"{report.records} run records: {len(report.problems) or 'no'} problem(s)", file=sys.stderr)
    return 0 if report.ok else 1


# --- get -----------------------------------------------------------------------------------------
def add_get_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("page", help="page id, alias (skill-wgmma) or path (wiki/hardware/wgmma.md)")
    part = p.add_mutually_exclusive_group()
    part.add_argument("--frontmatter-only", action="store_true", help="only the YAML frontmatter")
    part.add_argument("--body-only", action="store_true", help="only the Markdown body")
    part.add_argument("--prose", action="store_true",
                      help="only the body's prose: no generated tables, no code blocks (but those under a Fix or "
                           "Solution heading), no claim marks")
    part.add_argument("--claims", action="store_true", help="only the claims, as a table")
    p.add_argument("--case", action="append", default=[], metavar="PATTERN",
                   help="only the claims whose case (or id) holds this text or matches this shell pattern (bf16-*); "
                        "repeatable; with --claims or the whole page")
    p.add_argument("--shape", action="append", default=[], metavar="PATTERN",
                   help="only the claims whose shape holds this text or matches this pattern (*x7168); repeatable")
    p.add_argument("--section", metavar="HEADING",
                   help="only the body's sections whose heading holds this text, each whole with its code")
    p.add_argument("--follow-sources", action="store_true", help="append the source pages the page cites")
    p.add_argument("--include-code", action="store_true",
                   help="append the artifact bundle: the kernel's own files while the answer stays under 80,000 "
                        "characters, every other file (probe code, upstream) listed with its size, and each "
                        "probe's latest run record")
    p.add_argument("--files", action="append", default=[], metavar="PATTERN",
                   help="with --include-code: only the code files whose path or name matches (e.g. '*.py', "
                        "hopper_gemm.py; repeatable; '*' for all), not the page; the others are named, not printed")
    p.add_argument("--fetch-upstream", action="store_true",
                   help="with --include-code: upstream files that are not installed, from a local git mirror "
                        "($KERNELWIKI_UPSTREAM_MIRROR) or downloaded ($KERNELWIKI_UPSTREAM_URL), SHA-256 checked, "
                        "cached in the user cache")
    p.add_argument("--max-bytes", type=int, metavar="N",
                   help=f"print at most N bytes (>= {arguments.MIN_MAX_BYTES}), cut after a whole line; the last "
                        "line says the --offset to continue from")
    p.add_argument("--offset", type=int, default=0, metavar="BYTE", help="with --max-bytes: start at this byte")
    p.add_argument("--format", choices=("md", "json"), default="md", dest="fmt",
                   help="md, or json (schemas/output/get.v2)")


def cmd_get(args) -> int:
    from kernelwiki.commands.get import NoSection, build, window
    from kernelwiki.faces.output import continuation
    from kernelwiki.storage.index import UnknownPage
    from kernelwiki.storage.lookup import open_page

    part = ("frontmatter" if args.frontmatter_only else "body" if args.body_only else "prose" if args.prose
            else "claims" if args.claims else "page")
    request = arguments.get({"page": args.page, "part": part, "include_code": args.include_code,
                             "follow_sources": args.follow_sources, "fetch_upstream": args.fetch_upstream,
                             "files": args.files or None, "max_bytes": args.max_bytes, "offset": args.offset or None,
                             "format": args.fmt, "case": args.case or None, "shape": args.shape or None,
                             "section": args.section})
    try:
        wiki, entry = open_page(_repo(args), request.page)
        result = build(wiki, entry, request.options)
    except (UnknownPage, OutsideRepo, NoSection) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.fmt == "json":
        if _print_json(result.document, f"{entry.rel}: "):
            return 1
    else:
        text, next_offset, total = window(result.markdown(), request.offset, request.max_bytes)
        sys.stdout.write(text + continuation(next_offset, total))
    for message in result.errors:
        print(f"error: {message}", file=sys.stderr)
    return 1 if result.errors else 0


# --- query ---------------------------------------------------------------------------------------
def add_query_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("words", nargs="*", help="words to look for (aliases understood: UMMA, B200, H100, ...)")
    p.add_argument("--type", action="append", default=[], dest="types", help=f"one of {', '.join(arguments.PAGE_TYPES)}")
    p.add_argument("--tag", action="append", default=[], dest="tags", help="page must carry this tag (repeatable)")
    p.add_argument("--arch", action="append", default=[], dest="archs", help="sm_90a, sm_100a, H100, B200, ...")
    p.add_argument("--evidence", action="append", default=[], help=f"one of {', '.join(arguments.EVIDENCE)}")
    p.add_argument("--status", action="append", default=[], dest="statuses", help=f"one of {', '.join(arguments.STATUSES)}")
    p.add_argument("--limit", type=int, default=arguments.DEFAULT_LIMIT, help="at most this many results (0: all)")
    p.add_argument("--json", action="store_true", help="machine-readable output (schemas/output/query.v3)")


def cmd_query(args) -> int:
    from kernelwiki.commands.query import ask
    from kernelwiki.faces.output import query_document, query_text
    from kernelwiki.storage.termindex import open_index

    repo = _repo(args)
    index = open_index(repo)
    words, filters, limit = arguments.query(index, {"words": args.words, "type": args.types, "tag": args.tags,
                                                    "arch": args.archs, "evidence": args.evidence,
                                                    "status": args.statuses, "limit": args.limit})
    index, result = ask(repo, index, words, filters, limit)
    for problem in index.misnamed_problems():   # the rest of the wiki answers; say what was left out
        print(problem, file=sys.stderr)
    if args.json:
        return _print_json(query_document(result))
    lines, notes = query_text(result)
    for line in lines:
        print(line)
    for note in notes:
        print(note, file=sys.stderr)
    return 0


# --- refresh and probes --------------------------------------------------------------------------
def cmd_refresh(args) -> int:
    from kernelwiki.commands.refresh import refresh

    changes = refresh(_repo(args), check=args.check)
    verb = "differs from what the records imply" if args.check else "refreshed"
    for change in changes:
        print(change.refused or f"{change.rel}: {verb} ({', '.join(change.fields)})")
    if any(change.refused for change in changes):
        return 1
    if args.check and changes:
        print("run `kernelwiki refresh` and commit the result; measured values come only from run records",
              file=sys.stderr)
        return 1
    if not changes:
        print("every page matches its records", file=sys.stderr)
    return 0


def cmd_audit(args) -> int:
    from kernelwiki.commands.audit import audit

    if args.sources:
        return cmd_audit_sources(args)
    result = audit(_repo(args))
    for problem in result.problems:
        print(problem)
    share = f"{100 * result.unclaimed / result.total:.1f}%" if result.total else "0%"
    print(f"{result.total} performance numbers in prose: {result.spans} in claim spans, "
          f"{result.unclaimed} marked unclaimed ({share}), {result.bare} bare; {result.verdicts} verdict "
          f"sentences, {result.no_verdict} marked no-verdict", file=sys.stderr)
    return 1 if result.problems else 0


def cmd_audit_sources(args) -> int:
    from kernelwiki.commands.citations import check_citations, default_dirs

    wheels = [Path(d) for d in args.wheels] if args.wheels else default_dirs("KERNELWIKI_WHEELS")
    mirrors = [Path(d) for d in args.mirror] if args.mirror else default_dirs("KERNELWIKI_MIRRORS")
    references = [Path(d) for d in args.references] if args.references else default_dirs("KERNELWIKI_REFERENCES")
    result = check_citations(_repo(args), wheels, mirrors, references)
    for problem in result.problems:
        print(problem)
    share = f"{100 * result.quoted / result.claims:.0f}%" if result.claims else "-"
    print(f"{result.claims} spec/source-reported claims: {result.quoted} with a quote ({share}), "
          f"{result.checkable} checkable here, {result.matched} matched", file=sys.stderr)
    return 1 if result.problems else 0


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true", dest="all_probes", help="every probe")
    p.add_argument("--probe", action="append", default=[], help="this probe (repeatable)")
    p.add_argument("--page", action="append", default=[], help="the probes backing this page (repeatable)")
    p.add_argument("--case", action="append", default=[], help="only these case ids (repeatable)")
    p.add_argument("--compile-only", action="store_true", help="compile and scan PTX/SASS; needs no GPU")
    p.add_argument("--arch", action="append", default=[], help="compile-only: these architectures only")
    p.add_argument("--seed", type=int, help="input seed (default: a fresh random one, recorded)")
    p.add_argument("--timeout", type=_seconds, help="per-probe timeout in seconds (default: the probe's own)")
    p.add_argument("--no-refresh", action="store_true", help="write records but leave the pages alone")
    p.add_argument("--no-record", action="store_true", help="run and report only; write no record (implies --no-refresh)")
    p.add_argument("--gpus", help="run on these GPUs of this host at once, one probe process per GPU: all, "
                                  "the first N, or indices 0,2,3 (default: one GPU)")
    p.add_argument("--ray", metavar="ADDRESS", help="run each probe as a Ray task on a GPU of the cluster at ADDRESS "
                                                     "(auto, HOST:PORT, ray://HOST:PORT); records land here")
    p.add_argument("--gpu-model", action="append", default=[],
                   help="--ray: only GPUs of this model, e.g. H200 (repeatable; default: every model the cluster offers)")
    p.add_argument("--repeat", type=int, help="--ray: run each probe this many times per model, spread over nodes")


def cmd_probe_run(args) -> int:
    from kernelwiki.probing.specs import UnknownProbe, load_probes, select, with_calibration
    from kernelwiki.commands.refresh import refresh
    from kernelwiki.probing.runner import Options, RunnerBusy, run_probes, runner_lock, summary_table

    repo = _repo(args)
    if not (args.all_probes or args.probe or args.page):
        print("error: say which probes: --all, --probe ID or --page ID", file=sys.stderr)
        return 2
    from kernelwiki.model.vocab import Vocabulary

    probes = load_probes(repo)
    for probe_id in args.probe:
        arguments.probe_id(probes, probe_id)
    cases = arguments.case_ids(args.case)
    archs = arguments.compile_archs(Vocabulary.load(repo.schemas), args.arch)
    try:
        specs = select(probes, all_probes=args.all_probes, ids=args.probe, pages=args.page)
    except UnknownProbe as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    arguments.known_case_ids(specs, cases)
    options = Options(mode="compile-only" if args.compile_only else "run", cases=cases, archs=archs,
                      seed=args.seed, timeout_s=args.timeout, write=not args.no_record)
    address = arguments.ray_address(args.ray)
    if not address:   # a Ray task runs alone on its GPU: its probe quotes no ceilings (fleet.py)
        specs = with_calibration(specs, probes, options.mode)
    devices = _gpu_devices(arguments.gpus(args.gpus))
    models = arguments.gpu_models(args.gpu_model)
    repeat = arguments.count("repeat", args.repeat, 1, minimum=1)
    if address and devices:
        raise ArgumentError("ray: --ray and --gpus exclude each other (a Ray task gets one GPU of a node)")
    if (models or args.repeat) and not address:
        raise ArgumentError("gpu-model: --gpu-model and --repeat go with --ray ADDRESS")
    from kernelwiki.probing.processes import Interrupted, interruptible

    try:
        with interruptible(), runner_lock(repo):
            if address:
                from kernelwiki.probing.fleet import FleetError, run_on_ray

                try:
                    outcomes = run_on_ray(repo, specs, options, address, models=models, repeat=repeat)
                except FleetError as err:
                    print(f"error: {err}", file=sys.stderr)
                    return 2
            elif devices:
                from kernelwiki.probing.gpus import run_on_gpus

                outcomes = run_on_gpus(repo, specs, options, devices)
            else:
                outcomes = run_probes(repo, specs, options)
            if options.write and not args.no_refresh:
                for change in refresh(repo):
                    print(change.refused or f"refreshed {change.rel} ({', '.join(change.fields)})", file=sys.stderr)
    except RunnerBusy as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except Interrupted as err:
        print(f"interrupted by {err}: the running probe and everything it started were killed; records already "
              "written are kept and the pages were not refreshed (run `kernelwiki refresh`)", file=sys.stderr)
        return 128 + err.signum
    print(summary_table(outcomes))
    bad = [o for o in outcomes if o.status not in ("passed", "compiled", "skipped")]
    return 1 if bad else 0


def _gpu_devices(selection):
    """The GPUs --gpus chose on this host (None without --gpus); an ArgumentError if it lacks them."""
    if selection is None:
        return None
    from kernelwiki.harness.env import list_gpus
    from kernelwiki.probing.gpus import GpuChoiceError, choose

    try:
        return choose(selection, list_gpus())
    except GpuChoiceError as err:
        raise arguments.ArgumentError(str(err)) from None


def cmd_probe_list(args) -> int:
    from kernelwiki.commands.get import latest_record
    from kernelwiki.storage.index import Wiki
    from kernelwiki.probing.specs import load_probes

    repo = _repo(args)
    wiki = Wiki.load(repo)
    if args.json:
        from kernelwiki.faces.output import probe_list_document

        return _print_json(probe_list_document(wiki, load_probes(repo)))
    for spec in load_probes(repo).values():
        latest = latest_record(wiki, spec.id)
        state = f"{latest['status']} ({latest['mode']}, {latest['started_at']})" if latest else "never run"
        print(f"{spec.id:<28} {spec.kind:<12} {','.join(spec.archs):<16} {state:<44} {', '.join(spec.pages)}")
    return 0


def cmd_probe_show(args) -> int:
    from kernelwiki.commands.get import probe_bundle
    from kernelwiki.storage.index import Wiki
    from kernelwiki.probing.specs import load_probes

    repo = _repo(args)
    probes = load_probes(repo)
    spec = probes[arguments.probe_id(probes, args.probe_id)]
    if args.json:
        from kernelwiki.faces.output import probe_show_document

        return _print_json(probe_show_document(Wiki.load(repo), spec))
    print((spec.directory / "probe.yaml").read_text(encoding="utf-8"), end="")
    bundle = probe_bundle(Wiki.load(repo), spec.id)
    return _print_json(bundle.get("latest_record"))


def cmd_probe_record(args) -> int:
    from kernelwiki.faces.output import record_document, record_text
    from kernelwiki.probing.specs import load_probes
    from kernelwiki.storage.index import Wiki

    repo = _repo(args)
    probe_id = arguments.probe_id(load_probes(repo), args.probe_id)
    case, record = arguments.case_id(args.case), arguments.record_name(args.record)
    try:
        document = record_document(Wiki.load(repo), probe_id, record, case)
    except LookupError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if args.json:
        return _print_json(document)
    sys.stdout.write(record_text(document))
    return 0


def cmd_records_compress(args) -> int:
    from kernelwiki.commands.compress import compress_records
    from kernelwiki.probing.runner import RunnerBusy, runner_lock

    repo = _repo(args)
    try:
        with runner_lock(repo):   # a runner writing records meanwhile would be missed
            result = compress_records(repo)
    except RunnerBusy as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for line in result.done:
        print(line)
    for line in result.refused:
        print(line)
    if result.done:
        print(f"{result.compressed} record(s) compressed ({result.bytes_before:,} -> {result.bytes_after:,} bytes), "
              f"{result.references} reference(s) rewritten", file=sys.stderr)
    elif not result.refused:
        print("nothing to do: every run record is .json.gz and every reference names it", file=sys.stderr)
    return 1 if result.refused else 0


def cmd_mcp(args) -> int:
    try:
        from kernelwiki.faces.mcp_server import serve
    except ImportError as err:
        if not (err.name or "").startswith(("mcp", "anyio")):
            raise
        print(f"error: the MCP server needs the mcp package ({err}); install it with: pip install 'kernelwiki[mcp]'",
              file=sys.stderr)
        return 1
    return serve(_repo(args))


# --- site ------------------------------------------------------------------------------------------
def _mkdocs(repo: Repo, *args: str) -> int:
    import os
    import subprocess

    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    try:
        return subprocess.run([sys.executable, "-m", "mkdocs", *args, "-f", str(repo.root / "mkdocs.yml")],
                              cwd=repo.root, env=env).returncode
    except KeyboardInterrupt:
        return 130


def cmd_site_build(args) -> int:
    import time

    repo = _repo(args)
    start = time.perf_counter()
    if args.out:
        refused = _unsafe_site_dir(repo, Path(args.out))
        if refused:
            print(f"error: --out {args.out}: {refused}", file=sys.stderr)
            return 2
    out = ["-d", str(Path(args.out).resolve())] if args.out else []
    code = _mkdocs(repo, "build", "--strict", "--quiet", *out)
    if code == 0:
        print(f"site built in {time.perf_counter() - start:.1f} s: {args.out or repo.root / 'site'}", file=sys.stderr)
    return code


def _unsafe_site_dir(repo: Repo, out: Path) -> str | None:
    """Why mkdocs may not build into `out`, or None. mkdocs empties its output directory first, so
    it must not be a directory of the checkout (artifacts/, schemas/, ...) other than site/, nor hold
    the checkout, nor be a non-empty directory that is not an earlier build."""
    target, root = out.expanduser().resolve(), repo.root.resolve()
    site = root / "site"
    if target == root or target in root.parents:
        return "holds the repository; building there would delete it"
    if root in target.parents and target != site and site not in target.parents:
        return "is inside the repository; the only output directory there is site/ (the default)"
    if target.is_dir() and any(target.iterdir()) and not (target / "404.html").is_file():
        return "is a directory with files that is not an earlier site build; mkdocs would delete them"
    return None


def cmd_site_serve(args) -> int:
    return _mkdocs(_repo(args), "serve", "--strict", "-a", args.address)
