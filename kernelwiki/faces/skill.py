"""skills/kernelwiki/SKILL.md, generated from AGENTS.md so that the two never say different things.

AGENTS.md is the one text: its title, then one paragraph that says what the wiki is and when to
use it (the skill's `description`, which agent tools read to decide when to load the skill), then
the guide. The skill is the same text under YAML frontmatter (`name`, `description`).
"""

from __future__ import annotations

import re
from pathlib import Path

from kernelwiki.model import yamlio

SKILL_NAME = "kernelwiki"
SKILL_PATH = Path("skills") / SKILL_NAME / "SKILL.md"
MAX_DESCRIPTION = 1024  # what agent tools accept for a skill's description


class AgentsFormat(ValueError):
    """AGENTS.md lacks the title or the description paragraph the skill is built from."""


def skill_text(agents_md: str) -> str:
    """The SKILL.md that AGENTS.md implies."""
    agents_md = agents_md.replace("\r\n", "\n")
    match = re.match(r"# [^\n]+\n\n(?P<description>(?:[^\n]+\n)+)\n", agents_md)
    if not match:
        raise AgentsFormat("AGENTS.md:1: -: must open with '# title', a blank line and a description paragraph")
    description = " ".join(match["description"].split())
    if len(description) > MAX_DESCRIPTION:
        raise AgentsFormat(f"AGENTS.md:3: -: the description paragraph has {len(description)} characters; "
                           f"agent tools accept at most {MAX_DESCRIPTION}")
    frontmatter = yamlio.dump({"name": SKILL_NAME, "description": description})
    note = "<!-- Generated from AGENTS.md by `python scripts/build_skill.py`; edit AGENTS.md, not this file. -->"
    return f"---\n{frontmatter}---\n{note}\n\n{agents_md}"


def sync(root: Path, check: bool) -> str | None:
    """Write (or, with check, only compare) the skill; returns a message when it was out of date."""
    wanted = skill_text((root / "AGENTS.md").read_text(encoding="utf-8"))
    target = root / SKILL_PATH
    current = target.read_text(encoding="utf-8") if target.is_file() else None
    if current == wanted:
        return None
    if not check:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(wanted, encoding="utf-8", newline="\n")
    return f"{SKILL_PATH.as_posix()}: differs from what AGENTS.md implies" + ("" if check else "; rewritten")
