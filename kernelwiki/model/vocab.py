"""The controlled vocabularies (schemas/vocabulary.yaml) and the aliases queries understand."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path


# Words a user types -> terms pages use. Keys are lower-case.
QUERY_ALIASES: dict[str, list[str]] = {
    "umma": ["tcgen05", "tcgen05-mma"],
    "tcgen05.mma": ["tcgen05"],
    "b200": ["sm_100a", "blackwell"],
    "b300": ["sm_103a", "blackwell"],
    "gb200": ["sm_100a", "blackwell"],
    "blackwell": ["sm_100a"],
    "h100": ["sm_90a", "hopper"],
    "h200": ["sm_90a", "hopper"],
    "h800": ["sm_90a", "hopper"],
    "hopper": ["sm_90a"],
    "gmma": ["wgmma"],
    "hgmma": ["wgmma"],
    "bulk-tensor": ["tma"],
    "cp.async.bulk": ["tma"],
    "tensor-memory": ["tmem"],
    "fa4": ["flash-attention-4", "flash-attention"],
    "fa3": ["flash-attention"],
    "cutedsl": ["cute-dsl"],
    "cute": ["cute-dsl"],
    "e2m1": ["nvfp4", "fp4"],
    "ue8m0": ["mxfp8", "block-scale"],
}


_MAPPINGS = ("page_types", "sections", "vocabulary_fields")
_LISTS = ("evidence_levels", "dtypes", "tags")


def _shape_problem(data: object) -> str | None:
    """What is wrong with the shape of the vocabulary, or None."""
    if not isinstance(data, dict):
        return "must be a YAML mapping"
    for key in _MAPPINGS:
        value = data.get(key)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            return f"{key}: must map names to text"
    for key in _LISTS:
        if not isinstance(data.get(key), list) or not all(isinstance(v, str) for v in data[key]):
            return f"{key}: must be a list of text"
    archs = data.get("architectures")
    if not isinstance(archs, dict) or not isinstance(archs.get("canonical"), list) \
            or not all(isinstance(a, str) for a in archs["canonical"]) or not isinstance(archs.get("legacy"), dict) \
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in archs["legacy"].items()):
        return "architectures: must hold a canonical list and a legacy mapping of text"
    if set(data["page_types"]) != set(data["sections"]):
        return "page_types and sections must name the same page types"
    unknown = sorted(set(data["vocabulary_fields"].values()) - {"tags", "archs", "dtypes"})
    if unknown:
        return f"vocabulary_fields: {unknown[0]!r} is not tags, archs or dtypes"
    return None


@dataclass(frozen=True)
class Vocabulary:
    data: dict

    @classmethod
    def load(cls, schemas_dir: Path) -> "Vocabulary":
        """The vocabulary, checked for the shape every reader relies on; NotARepo (one message naming
        the file) when it cannot be read or has another shape."""
        from kernelwiki.model import yamlio
        from kernelwiki.model.files import UnsafeFile, read_regular
        from kernelwiki.model.problems import NotARepo

        where = "schemas/vocabulary.yaml"
        try:
            data, lines = yamlio.load(read_regular(schemas_dir / "vocabulary.yaml", yamlio.MAX_FILE_BYTES).decode("utf-8"))
        except UnsafeFile as err:
            raise NotARepo(f"{where}: {err}") from None
        except UnicodeDecodeError as err:
            raise NotARepo(f"{where}: not valid UTF-8 (byte {err.start})") from None
        except yamlio.YamlProblem as err:
            raise NotARepo(f"{where}:{err.line + 1}: {err.field}: {err.message}") from None
        wrong = _shape_problem(data)
        if wrong:
            raise NotARepo(f"{where}: {wrong}; the tools cannot work with this vocabulary")
        return cls(data)

    @staticmethod
    def well_formed(data: object) -> bool:
        """Whether `data` has the shape every property below relies on (a vocabulary kept in the
        index cache is checked before use: the cache is untrusted input)."""
        if not isinstance(data, dict):
            return False
        arch = data.get("architectures")
        return (all(_str_map(data.get(k)) for k in ("page_types", "sections", "vocabulary_fields"))
                and isinstance(arch, dict) and _str_list(arch.get("canonical")) and _str_map(arch.get("legacy"))
                and all(_str_list(data.get(k)) for k in ("tags", "dtypes", "evidence_levels")))

    @property
    def type_prefix(self) -> dict[str, str]:
        return self.data["page_types"]

    @property
    def sections(self) -> dict[str, str]:
        return self.data["sections"]

    @cached_property
    def archs(self) -> set[str]:
        arch = self.data["architectures"]
        return set(arch["canonical"]) | set(arch["legacy"])

    def canonical_arch(self, name: str) -> str:
        return self.data["architectures"]["legacy"].get(name, name)

    @cached_property
    def tags(self) -> set[str]:
        return set(self.data["tags"])

    @cached_property
    def dtypes(self) -> set[str]:
        return set(self.data["dtypes"])

    @property
    def evidence_levels(self) -> list[str]:
        return self.data["evidence_levels"]

    @property
    def vocabulary_fields(self) -> dict[str, str]:
        return self.data["vocabulary_fields"]

    def terms(self, kind: str) -> set[str]:
        return {"tags": self.tags, "archs": self.archs, "dtypes": self.dtypes}[kind]


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _str_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def composed(text: str) -> str:
    """`text` in Unicode NFC: what validate requires of page text, and what every name and word typed
    is turned into before it is compared, so that a decomposed "e" + U+0301 finds a page's "\u00e9"."""
    return unicodedata.normalize("NFC", text)


def fold(text: str) -> str:
    """The form names and words are compared in: composed (NFC), then lower case."""
    return composed(text).lower()


def closest(word: str, choices, n: int = 3) -> list[str]:
    import difflib

    return difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6)


def did_you_mean(word: str, choices) -> str:
    near = closest(word, choices)
    return f" (did you mean {', '.join(repr(c) for c in near)}?)" if near else ""
