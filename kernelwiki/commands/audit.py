"""`kernelwiki audit`: find performance numbers in prose and frontmatter text that no claim backs.

A performance number is a number followed by a performance unit (TFLOP/s, GB/s, ×, %, µs, cycles,
...). In page prose it must sit inside an inline claim span (kernelwiki.model.spans) so that `refresh`
owns its text. Not audited: the frontmatter, fenced code, inline `code`, claim spans, generated
blocks and HTML comments. A line that carries `<!-- unclaimed: reason -->` is exempt — for numbers
that are not measurements (a definition, an example input) — and is counted, so the share of
exemptions stays visible.

Frontmatter text (title, summary, symptom, and a source page's `facts`) cannot hold a span, so a
performance number there must be a value a claim carries: on a page, one of its own claims (its
value, ratio, baseline or quote); on a source page, a claim of any page that cites the source
(its value or quote), so that each figure a source page states is one some page quotes verbatim.

Sentences that promise evidence instead of stating it ("once the runner has recorded them") are
reported too: a page says what the records hold, or that a result is missing.

A ratio span (`<!-- claim:ID.ratio -->`) says "this many times the baseline": the sentence it stands
in must name that baseline (the first word of the claim's `baseline.name`, "ours, " dropped), so that
a headline that moved to a stronger baseline cannot leave prose that credits the ratio to the old
one (issue 23: ratios against DeepGEMM described as "against cuBLAS blockwise").

A sentence that compares or judges ("faster", "slower", "wins", "beats", "pays", "matches", "leads",
"at L2 speed", "reaches the ceiling", ...; `verdict_problems`) carries a claim span that proves it,
and its ratio spans may not contradict the word: "faster" over ratios all below 1, "slower" over
ratios all above 1 (unless the sentence makes the baseline the subject: "cuBLAS was faster than
ours"), a "lead" or "win" whose every ratio lies inside the p10-p90 spread of the two timings
(`within_spread`). A sentence about a goal says from a span whether it is met; each goal in the
page's `goals` is said met or missed, as refresh judges it, by a sentence holding its claim's span.
Headings name topics and are not judged. A line marked `<!-- no-verdict: reason -->` is exempt (a
mechanism, not a measurement: "a bank conflict serializes the access"), and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kernelwiki.commands.evidence import LOWER_IS_BETTER_UNITS
from kernelwiki.commands.refresh.status import goal_met, page_goals
from kernelwiki.model.pages import read_page
from kernelwiki.model.problems import Problem, field_path
from kernelwiki.storage.repo import Repo
from kernelwiki.model.fences import prose_lines
from kernelwiki.model.spans import SPAN, body_first_line

NUMBER = r"(?<![\w.])~?\d+(?:[.,]\d+)*"
UNITS = (r"(?:\s?(?:TFLOP/s|TFLOPS|PFLOP/s|PFLOPS|GFLOP/s|GB/s|TB/s|FLOP/clk(?:/SM)?|MHz|GHz|µs|us|ms|ns|"
         r"cycles?|ulps?|W)(?![\w/])"      # word units end at a word boundary ("7 Warps" is not 7 W)
         r"|\s?%"
         r"|×(?![\w(])"                    # 1.3× is a multiplier; 128×64, 64×K and 4 × 8 are shapes
         r"|x(?![\w.]))")                  # 1.2x, but not 0x1F, 4x4 or 2x.y
PERFORMANCE_NUMBER = re.compile(NUMBER + UNITS)
UNCLAIMED = re.compile(r"<!-- unclaimed:\s*(\S[^>]*?)\s*-->")
UNCLAIMED_EMPTY = re.compile(r"<!-- unclaimed:\s*-->")
BLOCK = re.compile(r"^<!-- kernelwiki:(begin|end) ([a-z0-9-]+) -->\s*$")
COMMENT = re.compile(r"<!--.*?-->")
INLINE_CODE = re.compile(r"(`+).*?\1")


@dataclass
class Audit:
    problems: list[Problem] = field(default_factory=list)
    spans: int = 0
    """Claim spans in prose (each a performance number the tool owns)."""
    unclaimed: int = 0
    """Performance numbers on lines marked `<!-- unclaimed: reason -->`."""
    bare: int = 0
    """Performance numbers outside spans on unmarked lines (each a problem)."""
    verdicts: int = 0
    """Sentences with a verdict word, each checked against its spans."""
    no_verdict: int = 0
    """Verdict sentences on lines marked `<!-- no-verdict: reason -->`."""

    @property
    def total(self) -> int:
        return self.spans + self.unclaimed + self.bare


def audit_body(rel: str, body: str, first_line: int, result: Audit) -> None:
    """Add one page body's spans, exempt numbers and problems to `result`."""
    in_block = False
    for index, line in prose_lines(body):
        marker = BLOCK.match(line.rstrip("\r\n"))
        if marker:
            in_block = marker.group(1) == "begin"
            continue
        if in_block:
            continue
        result.spans += len(SPAN.findall(line))
        if UNCLAIMED_EMPTY.search(line):
            result.problems.append(Problem(rel, first_line + index, "unclaimed", "give a reason after 'unclaimed:'"))
        text = INLINE_CODE.sub(" ", COMMENT.sub(" ", SPAN.sub(" ", line)))
        found = [m.group(0) for m in PERFORMANCE_NUMBER.finditer(text)]
        if not found:
            continue
        if UNCLAIMED.search(line):
            result.unclaimed += len(found)
            continue
        result.bare += len(found)
        for number in found:
            result.problems.append(Problem(
                rel, first_line + index, "prose",
                f"performance number {number.strip()!r} outside a claim span; write it as "
                "<!-- claim:ID -->...<!-- /claim --> or mark the line <!-- unclaimed: reason -->"))


PROMISE = re.compile(r"\b(?:once|when|after|as soon as)\s+the\s+(?:runner|probe|record|lead)s?\s+(?:has|have)?\s*"
                     r"(?:recorded|run|measured|records|runs|measures)\b", re.IGNORECASE)
FRONTMATTER_TEXT = ("title", "summary", "symptom")
BARE_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _numbers(text: str) -> set[float]:
    return {float(n.replace(",", "")) for n in BARE_NUMBER.findall(text) if n.replace(",", "").count(".") <= 1}


def claim_numbers(claim: dict) -> set[float]:
    """The numbers a claim carries: its value, ratio, baseline value and the numbers of its quote."""
    out: set[float] = set()
    for value in (claim.get("value"), claim.get("ratio"), (claim.get("baseline") or {}).get("value")
                  if isinstance(claim.get("baseline"), dict) else None):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.add(float(value))
        elif isinstance(value, str):
            out |= _numbers(value)
    if isinstance(claim.get("quote"), str):
        out |= _numbers(claim["quote"])
    return out


def audit_frontmatter(rel: str, meta: dict, backed: set[float], line, result: Audit) -> None:
    """Performance numbers in a page's frontmatter text that no claim in `backed` carries."""
    fields = [((key,), meta.get(key)) for key in FRONTMATTER_TEXT]
    if meta.get("type") == "source" and isinstance(meta.get("facts"), list):
        fields += [(("facts", index), fact) for index, fact in enumerate(meta["facts"])]
    for path, text in fields:
        if not isinstance(text, str):
            continue
        for match in PERFORMANCE_NUMBER.finditer(text):
            if float(BARE_NUMBER.search(match.group(0)).group(0).replace(",", "")) in backed:
                continue
            result.bare += 1
            where = ("a claim of a page citing this source (the number in its value or quote)"
                     if meta.get("type") == "source" else "one of the page's claims")
            result.problems.append(Problem(rel, line(path), field_path(path),
                                           f"performance number {match.group(0).strip()!r} in the frontmatter that no "
                                           f"claim carries; make it the value of {where}, or leave it out"))


SENTENCE_END = re.compile(r"(?<=[.!?;])\s+(?=[A-Z*(`<])|\n\s*\n|\n(?=\s*[-*] )")
MARKUP = re.compile(r"<!--(?! claim:[^>]*\.ratio -->).*?-->")
RATIO_SPAN = re.compile(r"<!-- claim:([A-Za-z0-9][A-Za-z0-9._-]*)\.ratio -->")


def baseline_word(name: str) -> str:
    """The word a sentence must hold to name a baseline: its first word ("cuBLAS" of "cuBLAS
    blockwise FP8"), or for one of our own variants ("ours, production kernel") the word after."""
    words = name.removeprefix("ours, ").replace(",", " ").split()
    return words[0] if words else name


def unattributed_ratios(rel: str, body: str, first_line: int, claims: dict[str, dict]) -> list[Problem]:
    """Ratio spans whose sentence does not name the claim's baseline."""
    out = []
    text = body
    start = 0
    for piece in SENTENCE_END.split(text):
        offset = text.find(piece, start)
        start = offset + len(piece)
        for match in RATIO_SPAN.finditer(piece):
            claim = claims.get(match.group(1))
            baseline = (claim or {}).get("baseline") if isinstance((claim or {}).get("baseline"), dict) else None
            if not baseline or not isinstance(baseline.get("name"), str):
                continue
            word = baseline_word(baseline["name"])
            if word.lower() not in MARKUP.sub(" ", piece).lower():
                line = first_line + text.count("\n", 0, offset + match.start())
                out.append(Problem(rel, line, "prose", f"ratio {match.group(1)}.ratio is against "
                                   f"{baseline['name']!r}, but its sentence does not name {word!r}; say whose ratio it is"))
    return out


POSITIVE = (r"faster|quicker|wins?|won|winning|beats?|beaten|outperform(?:s|ed)?|"
            r"lead(?:s|ing)?(?! to)(?![- ](?:dimension|dim|mode|byte|zero|edge|warp|thread|lane|cta|bit))|led(?! to)|"
            r"ahead of|pays(?: off)?|paid off|pay off|speeds? up|sped up|better than")
NEGATIVE = r"slower|loses to|lost to|(?:falls?|fell|stays?|stayed|lags?|lagged|ran|runs?) behind|trails?|worse than"
NEUTRAL = (r"match(?:es|ed)?|on par|as fast as|at (?:[\w-]+ ){0,2}speed|reach(?:es|ed)? (?:the |its |their )?"
           r"(?:ceiling|peak|roofline)|at (?:the )?(?:ceiling|peak)|breaks? even|broke even")
VERDICT = re.compile(rf"\b(?:{POSITIVE}|{NEGATIVE}|{NEUTRAL})\b", re.I)
POSITIVE_WORD = re.compile(rf"\b(?:{POSITIVE})\b", re.I)
NEGATIVE_WORD = re.compile(rf"\b(?:{NEGATIVE})\b", re.I)
LEAD_WORD = re.compile(r"\b(?:faster|wins?|won|winning|beats?|outperform(?:s|ed)?|lead(?:s|ing)?(?! to)(?![- ]\w)|led(?! to)|ahead of|"
                       r"slower|loses to|lost to|behind)\b", re.I)
UNDIRECTED = (*LOWER_IS_BETTER_UNITS, "relative", "errors", "hazards", "bool")
"""Units whose ratio is not a speedup (a time over a time, one error over another): no polarity."""
REVERSED = re.compile(r"\bthan (?:ours|our\b|the kernel|it\b)|\bahead of ours\b", re.I)
GOAL = re.compile(r"\bgoals?\b", re.I)
GOAL_MET = re.compile(r"\b(?:met|meets?|reached|reaches|achieved)\b", re.I)
GOAL_MISSED = re.compile(r"\b(?:missed|miss(?:es)?|short of|falls? short|fell short|not met|not reached|unmet)\b", re.I)
NO_VERDICT = re.compile(r"<!-- no-verdict:\s*(\S[^>]*?)\s*-->")
PROSE_SENTENCE = re.compile(r"(?<=[.!?;])\s+(?=[A-Z*(`<])|\s(?=[-*] )")


def prose_sentences(body: str) -> list[tuple[int, int, str]]:
    """(first and last 0-based body line, text) of each sentence of the prose: fenced code,
    generated blocks and headings left out, paragraphs joined so that a sentence spanning lines is one."""
    lines = dict(prose_lines(body))
    out: list[tuple[int, int, str]] = []
    paragraph: list[tuple[int, str]] = []
    in_block = False

    def flush() -> None:
        if not paragraph:
            return
        text = " ".join(line for _, line in paragraph)
        starts, position = [], 0
        for index, line in paragraph:
            starts.append((position, index))
            position += len(line) + 1
        position = 0
        for piece in PROSE_SENTENCE.split(text):
            at = text.find(piece, position)
            position = at + len(piece)
            first = max(i for p, i in starts if p <= max(at, 0))
            last = max(i for p, i in starts if p <= max(at + len(piece) - 1, 0))
            out.append((first, last, piece))
        paragraph.clear()

    for index, line in enumerate(body.split("\n")):
        marker = BLOCK.match(line.rstrip("\r"))
        if marker:
            flush()
            in_block = marker.group(1) == "begin"
            continue
        if index not in lines or in_block or not line.strip() or line.lstrip().startswith("#"):
            flush()
            continue
        paragraph.append((index, line))
    flush()
    return out


BASELINE_CHOICE = re.compile(r"\bthe (?:faster|fastest|stronger|strongest)(?: correct)?(?: one)?(?: baseline)? of\b"
                             r"|\b(?:faster|fastest|strongest) correct (?:baseline|candidate|one)\b", re.I)
"""How a baseline was chosen ("against the faster of cuBLAS and quack"), not a verdict on ours."""


def _words(sentence: str) -> str:
    """A sentence without inline code, span texts, HTML comments and the wording that names how a
    baseline was chosen: what its words say."""
    return BASELINE_CHOICE.sub(" ", INLINE_CODE.sub(" ", COMMENT.sub(" ", SPAN.sub(" ", sentence))))


def verdict_problems(rel: str, body: str, first_line: int, claims: dict[str, dict], goals: list,
                     result: Audit) -> list[Problem]:
    """Verdict sentences without a span, spans that contradict their verdict word, and goals not
    said met or missed from a span (see the module's docstring)."""
    out: list[Problem] = []
    said: dict[str, list[str]] = {}   # span name -> the words of each goal sentence holding it
    aimed = {name for goal in goals if isinstance(goal, dict) and (target := str(goal.get("claim", "")))
             for name in _goal_names(target)}
    raw = body.split("\n")
    for index, last, sentence in prose_sentences(body):
        words = _words(sentence)
        line = first_line + index
        spans = [m.group(1) for m in SPAN.finditer(sentence)]
        if GOAL.search(words):
            if not spans or not (GOAL_MET.search(words) or GOAL_MISSED.search(words)):
                out.append(Problem(rel, line, "prose", "a sentence about a goal says from a claim span whether the "
                                   "goal is met or missed"))
            for name in set(spans) & aimed:
                said.setdefault(name, []).append(words)
        verdict = VERDICT.search(words)
        if not verdict:
            continue
        result.verdicts += 1
        if any(NO_VERDICT.search(raw[i]) for i in range(index, last + 1)):
            result.no_verdict += 1
            continue
        if not spans:
            out.append(Problem(rel, line, "prose", f"{verdict.group(0)!r} judges without a claim span: state the "
                               "figure that shows it as a span, or say less"))
            continue
        # A time-like claim's ratio is, in some probes, its time over the baseline's (above 1: slower)
        # and in others a speedup; its direction is not known here, so only its spread is judged.
        ratios = [(claims[name[:-6]], name[:-6]) for name in spans if name.endswith(".ratio") and name[:-6] in claims
                  and isinstance(claims[name[:-6]].get("ratio"), (int, float))]
        directed = [(c, n) for c, n in ratios if c.get("unit") not in UNDIRECTED]
        if not ratios:
            continue
        reversed_ = bool(REVERSED.search(words)) or any(
            baseline_word(str((c.get("baseline") or {}).get("name", ""))).lower() in words[:verdict.start()].lower()
            for c, _ in ratios if isinstance(c.get("baseline"), dict))
        values = [float(c["ratio"]) for c, _ in directed]
        positive, negative = POSITIVE_WORD.search(words), NEGATIVE_WORD.search(words)
        if not values:
            pass
        elif not reversed_ and positive and not negative and all(v < 1 for v in values):
            out.append(Problem(rel, line, "prose", f"{positive.group(0)!r} over ratio(s) below 1 "
                               f"({', '.join(f'{v:g}' for v in values)}): the span says ours is slower"))
        elif not reversed_ and negative and not positive and all(v > 1 for v in values):
            out.append(Problem(rel, line, "prose", f"{negative.group(0)!r} over ratio(s) above 1 "
                               f"({', '.join(f'{v:g}' for v in values)}): the span says ours is faster"))
        lead = LEAD_WORD.search(words)
        if lead and all(c.get("within_spread") for c, _ in ratios):
            out.append(Problem(rel, line, "prose", f"{lead.group(0)!r} over {', '.join(n for _, n in ratios)}, whose "
                               "timings overlap p10 to p90: inside the spread neither is ahead"))
    # Whether some sentence holding a span of a goal's claim says met (and not missed), or missed:
    # judged once per claim, however many goals name it (goals x sentences took minutes on one page).
    verdicts: dict[str, tuple[bool, bool]] = {}
    for goal in goals:
        if not isinstance(goal, dict) or not goal.get("claim"):
            continue
        target = str(goal["claim"])
        if target not in verdicts:
            sentences = [w for name in _goal_names(target) for w in said.get(name, [])]
            verdicts[target] = (any(GOAL_MET.search(w) and not GOAL_MISSED.search(w) for w in sentences),
                                any(GOAL_MISSED.search(w) for w in sentences))
        met = goal_met(goal, claims)
        if met is None or not verdicts[target][0 if met else 1]:
            state = "unjudged (its claim holds no number)" if met is None else ("met" if met else "missed")
            out.append(Problem(rel, first_line, "goals", f"goal {goal.get('statement')!r} is {state}: a sentence "
                               f"with a span of {goal['claim']} must say so"))
    return out


def _goal_names(target: str) -> set[str]:
    """The span names that state a goal on claim `target`: the claim, its ratio, or (for a goal on
    ID.ratio) the claim itself."""
    return {target, f"{target}.ratio", target.removesuffix(".ratio")}


def audit(repo: Repo) -> Audit:
    """Audit the prose and frontmatter text of every page under wiki/."""
    result = Audit()
    pages = []
    for path in sorted(repo.wiki.rglob("*.md")):
        page = read_page(path, repo.rel(path))
        if page.meta is not None and isinstance(page.meta, dict):
            pages.append(page)   # validate reports unreadable pages
    by_source: dict[str, set[float]] = {}
    for page in pages:
        for claim in page.meta.get("claims") or []:
            if isinstance(claim, dict) and isinstance(claim.get("source"), str):
                by_source.setdefault(claim["source"], set()).update(claim_numbers(claim))
    for page in pages:
        first = body_first_line(page.frontmatter_text)
        audit_body(page.rel, page.body, first, result)
        for offset, text in enumerate(page.body.split("\n")):
            if PROMISE.search(text):
                result.problems.append(Problem(page.rel, first + offset, "prose",
                                               "promises evidence that is not there; say what the records hold, "
                                               "or that the result is missing"))
        claims = {c["id"]: c for c in page.meta.get("claims") or [] if isinstance(c, dict) and isinstance(c.get("id"), str)}
        result.problems += unattributed_ratios(page.rel, page.body, first, claims)
        if page.meta.get("type") != "source":
            result.problems += verdict_problems(page.rel, page.body, first, claims,
                                                page_goals(page.meta), result)
        own = set().union(*(claim_numbers(c) for c in page.meta.get("claims") or [] if isinstance(c, dict)))
        backed = by_source.get(page.meta.get("id"), set()) if page.meta.get("type") == "source" else own
        audit_frontmatter(page.rel, page.meta, backed, page.line, result)
    return result

