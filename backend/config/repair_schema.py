"""What the config descriptions (schema.py's Sections) say to a repair: where a stray key belongs, which known key
a misspelt one is, and the value a wrong one most likely meant.

Lookups that walk a whole description (every section below the root that declares a key) are built once per root
section and kept, so repairing a file with many unknown keys stays linear in the file. The did-you-mean searches
(difflib) are the costly part: each word is searched once, and one file's repair searches its first SUGGEST_LIMIT
unknown words only (KeyBudget).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable
from typing import Any

import yaml

from traindeck.backend.config.messages import PathT
from traindeck.backend.config.schema import FieldSpec, Section, fields_of
from traindeck.backend.config.validate import SUGGEST_LIMIT, suggest


class KeyBudget:
    """The unknown keys one repair searches for the known key they misspell: the first `limit` words of the file.
    Later words are left as they are and counted: a file with thousands of unknown keys is no paste with a typo or
    two, and a search for each would cost a difflib pass per key per section asked."""

    def __init__(self, limit: int = SUGGEST_LIMIT) -> None:
        self.limit = limit
        self.searched: set[str] = set()
        self.skipped: set[str] = set()

    def allows(self, word: str) -> bool:
        """True when `word` is (or may now be) searched; False, and counted, past the limit."""
        if word in self.searched:
            return True
        if len(self.searched) < self.limit:
            self.searched.add(word)
            return True
        self.skipped.add(word)
        return False


def knows(section: type[Section], key: Any) -> bool:
    return isinstance(key, str) and (key in fields_of(section) or key in section.DEPRECATED)


def child_section(section: type[Section] | None, key: Any) -> type[Section] | None:
    if section is None or not isinstance(key, str):
        return None
    spec = fields_of(section).get(key)
    if spec is None and key in section.DEPRECATED and section.DEPRECATED[key]:
        spec = fields_of(section).get(section.DEPRECATED[key])
    return spec.section if spec is not None and spec.kind == "section" else None


def homes(section: type[Section], key: Any) -> list[PathT]:
    """Paths (below `section`) of the sections that declare `key` (old names accepted as aliases do not count
    here: only a key a section really has says where a stray key belongs)."""
    if not isinstance(key, str):
        return []
    index = _HOME_INDEX.get(section)
    if index is None:
        index = _HOME_INDEX[section] = _home_index(section)
    return list(index.get(key, ()))


_HOME_INDEX: dict[type[Section], dict[str, tuple[PathT, ...]]] = {}


def _home_index(section: type[Section]) -> dict[str, tuple[PathT, ...]]:
    """key -> the paths of the sections below `section` declaring it, in the order of the descriptions (built
    once: looking each stray key up is then one dict access instead of a walk of every section)."""
    index: dict[str, list[PathT]] = {}

    def walk(current: type[Section], prefix: PathT, seen: frozenset[type]) -> None:
        for name, spec in fields_of(current).items():
            child = spec.section if spec.kind == "section" else None
            if child is None or child in seen:
                continue
            here = prefix + (name,)
            for key in fields_of(child):
                index.setdefault(key, []).append(here)
            walk(child, here, seen | {current})

    walk(section, (), frozenset())
    return {key: tuple(paths) for key, paths in index.items()}


def undescribed_below(root: type[Section], budget: KeyBudget | None = None) -> Callable[[PathT], bool]:
    """For the lenient JSON reader: a test that is True for a path below which no description knows any key (an
    unknown key that is no misspelling of a known one and belongs in no section), where a repair edits nothing in
    place, so a strict mapping there can be read in one call. `budget`: the repair's, which its searches count in."""
    movable: dict[tuple[type[Section], str], bool] = {}  # asked once per key: suggest_key costs a difflib pass

    def plain_below(path: PathT) -> bool:
        section: type[Section] | None = root
        for key in path:
            if section is None or not isinstance(key, str):
                return True
            if knows(section, key):
                section = child_section(section, key)
                continue
            if (section, key) not in movable:
                movable[(section, key)] = bool(suggest_key(section, key, budget) or homes(section, key))
            # A key that may be renamed or moved into a section has its keys repaired in place; others not.
            return not movable[(section, key)]
        return section is None

    return plain_below


def removed_keys(section: type[Section]) -> dict[str, str]:
    removed = getattr(section, "REMOVED", None)
    return removed if isinstance(removed, dict) else {}


def suggest_key(section: type[Section], key: str, budget: KeyBudget | None = None) -> str | None:
    """The one known key `key` is a misspelling of; None for a key the tool dropped (REMOVED: not a typo), and for
    one past the `budget` (not searched)."""
    if not isinstance(key, str) or key in removed_keys(section):
        return None
    if budget is not None and not budget.allows(key):
        return None
    candidates = list(fields_of(section)) + [k for k in section.DEPRECATED]
    hint = suggest(key, candidates)
    return hint if hint is not None and hint != key else None


def close_words(word: str, candidates: list[str]) -> list[str]:
    """Every candidate close enough to be the intended spelling (as suggest() measures it)."""
    return list(_close_in(word, tuple(c for c in candidates if isinstance(c, str))))


@functools.lru_cache(maxsize=4096)
def _close_in(word: str, pool: tuple[str, ...]) -> tuple[str, ...]:
    lowered = {c.lower(): c for c in pool}
    return tuple(lowered[c] for c in difflib.get_close_matches(word.lower(), list(lowered), n=4, cutoff=0.75))


def close_choices(word: str, choices: list[str]) -> list[str]:
    """The allowed values `word` may be a misspelling of: close as suggest() measures, or one keystroke away."""
    return list(dict.fromkeys(close_words(word, choices) + one_edit_away(word, choices)))


def one_edit_away(word: str, candidates: list[str]) -> list[str]:
    """Candidates one keystroke from `word`, ignoring case: one letter changed, added, dropped, or two swapped."""
    w = word.lower()
    return [c for c in candidates if isinstance(c, str) and c.lower() != w and _one_edit(w, c.lower())]


def _one_edit(a: str, b: str) -> bool:
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        return len(diff) == 1 or (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
                                  and a[diff[1]] == b[diff[0]])
    short, long = (a, b) if len(a) < len(b) else (b, a)
    i = 0
    while i < len(short) and short[i] == long[i]:
        i += 1
    return short[i:] == long[i + 1:]


NOTHING = object()


def needs_quotes(text: str) -> bool:
    try:
        return yaml.safe_load(text) != text or text != text.strip() or ":" in text or "#" in text or not text
    except yaml.YAMLError:
        return True


def corrected(value: Any, spec: FieldSpec) -> Any:
    """The value the user most likely meant, or NOTHING when there is no single clear one."""
    if isinstance(value, str):
        word = value.strip()
        if spec.auto and word.lower() == "auto":
            return "auto"
        if spec.kind == "bool" or (spec.kind == "choice" and any(isinstance(c, bool) for c in spec.choices)):
            if word.lower() in ("true", "false"):
                return word.lower() == "true"
        if spec.kind in ("int", "float") or (spec.kind == "choice" and all(
                isinstance(c, (int, float)) and not isinstance(c, bool) for c in spec.choices)):
            try:
                number: int | float = int(word)
            except ValueError:
                try:
                    number = float(word)
                except ValueError:
                    return NOTHING
            return number
        if spec.kind == "choice":
            strings = [c for c in spec.choices if isinstance(c, str)]
            hint = suggest(word, strings)
            if hint is None:  # short words: "cpy" is one keystroke from 'cpu' yet below difflib's cutoff
                near = one_edit_away(word, strings)
                hint = near[0] if len(near) == 1 else None
            return hint if hint is not None else NOTHING
        return NOTHING
    if isinstance(value, bool) and spec.kind == "choice":
        # YAML 1.1 reads an unquoted no/yes/off/on as true/false: accelerate's 'no' written without quotes.
        spelled = {False: ("no", "false", "off"), True: ("yes", "true", "on")}[value]
        matches = [c for c in spec.choices if isinstance(c, str) and c.lower() in spelled]
        return matches[0] if len(matches) == 1 else NOTHING
    return NOTHING


def show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    return repr(value) if isinstance(value, str) else str(value)

