"""AGENTS.md and the skill generated from it: in sync, loadable, and every command in them real."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT
from kernelwiki.faces.skill import SKILL_PATH, AgentsFormat, skill_text, sync
from kernelwiki.faces.cli import build_parser
from kernelwiki.storage.index import Wiki
from kernelwiki.probing.specs import load_probes
from kernelwiki.storage.repo import Repo

AGENTS = (ROOT / "AGENTS.md").read_text(encoding="utf-8")


def test_skill_is_generated_from_agents_md():
    assert (ROOT / SKILL_PATH).read_text(encoding="utf-8") == skill_text(AGENTS), \
        "run `python scripts/build_skill.py` and commit the result"
    done = subprocess.run([sys.executable, str(ROOT / "scripts/build_skill.py"), "--check"], capture_output=True)
    assert done.returncode == 0, done.stderr


def test_skill_frontmatter_is_what_agent_tools_load():
    text = (ROOT / SKILL_PATH).read_text(encoding="utf-8")
    meta = yaml.safe_load(text.split("---\n")[1])
    assert set(meta) == {"name", "description"} and meta["name"] == SKILL_PATH.parent.name
    assert re.fullmatch(r"[a-z0-9-]{1,64}", meta["name"]) and 50 < len(meta["description"]) <= 1024
    assert meta["description"].startswith("Look up how to write fast GPU kernels")


def test_check_reports_and_write_repairs(tmp_path):
    (tmp_path / "AGENTS.md").write_text(AGENTS.replace("## Never", "## Never ever"))
    (tmp_path / SKILL_PATH).parent.mkdir(parents=True)
    shutil.copy(ROOT / SKILL_PATH, tmp_path / SKILL_PATH)
    assert "differs from what AGENTS.md implies" in sync(tmp_path, check=True)
    assert "## Never ever" not in (tmp_path / SKILL_PATH).read_text()
    assert sync(tmp_path, check=False).endswith("rewritten")
    assert "## Never ever" in (tmp_path / SKILL_PATH).read_text() and sync(tmp_path, check=True) is None


def test_agents_md_needs_its_description_paragraph():
    with pytest.raises(AgentsFormat, match="description paragraph"):
        skill_text("# kernelwiki\n## Look things up\n")
    with pytest.raises(AgentsFormat, match="at most 1024"):
        skill_text("# kernelwiki\n\n" + "word " * 300 + "\n\nrest\n")


def _commands() -> list[list[str]]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", AGENTS, re.DOTALL):
        for line in block.splitlines():
            words = shlex.split(line.split("#")[0])
            if words[:1] == ["kernelwiki"]:
                commands.append(words[1:])
    return commands


def test_every_command_in_the_guide_parses_and_names_real_pages_and_probes():
    commands = _commands()
    assert len(commands) > 10
    parser = build_parser()
    wiki, probes = Wiki.load(Repo(ROOT)), load_probes(Repo(ROOT))
    for argv in commands:
        args = parser.parse_args(argv)  # an unknown option exits 2 and fails the test
        if argv[0] == "get":
            wiki.resolve(args.page)
        elif argv[:2] == ["probe", "show"]:
            assert args.probe_id in probes, args.probe_id
        elif argv[:2] == ["probe", "run"]:
            assert all(p in probes for p in args.probe), args.probe
            for page in args.page:
                wiki.resolve(page)
