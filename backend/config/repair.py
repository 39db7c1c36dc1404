"""Repairing pasted configs: lost indentation, JSON punctuation, Python literals, comments, typos, old key names.

`repair_text(text, file=None)` returns the config that was meant, with each change in words and its line, and says
so instead of guessing when a fix is ambiguous:

  (a) lost indentation: keys of a section found at the level above it (a YAML `deepspeed_config:` left empty with
      zero_stage, offload_optimizer_device ... following at the top; fsdp_* keys; a DeepSpeed JSON with
      zero_optimization keys at the top) are moved under the one section whose description (fields_of) has them,
      preferring the empty section header they follow in the text. A key several sections know is left where it
      is and reported.
  (b) JSON: trailing and missing commas, Python's True/False/None, single-quoted strings, unquoted keys, // and
      /* */ comments (DeepSpeed's hjson reader takes some of these; accelerate and the HF Trainer read with json
      and refuse them): fixed by token-level edits so the rest of the text keeps its formatting.
  (c) typos: a value that is not allowed where exactly one allowed value is close ("DEEPSPED", "cpuu", "Bf16",
      "Auto"), a key close to exactly one known key, text that should be a number or true/false, and deprecated
      keys renamed to their new names.

Output: minimal edits of the original text when the structure is unchanged; otherwise YAML through
yaml.safe_dump(sort_keys=False) or JSON with a 2-space indent (comments in the original are then lost).

The parts: repair_tree.py (the tree both formats are read into, and the YAML reader), tolerant_json.py (the
lenient JSON reader, shared with the checker, which names every syntax problem it finds), repair_schema.py (what
the config descriptions say about a stray key or a wrong value); this module walks the tree and decides.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from traindeck.backend.config.bounded import MAX_BYTES, too_big
from traindeck.backend.config.messages import PathT, format_path
from traindeck.backend.config.repair_schema import NOTHING as _NOTHING
from traindeck.backend.config.repair_schema import KeyBudget, undescribed_below
from traindeck.backend.config.repair_schema import child_section as _child_section
from traindeck.backend.config.repair_schema import close_choices as _close_choices
from traindeck.backend.config.repair_schema import close_words as _close
from traindeck.backend.config.repair_schema import corrected as _corrected
from traindeck.backend.config.repair_schema import homes as _homes
from traindeck.backend.config.repair_schema import knows as _knows
from traindeck.backend.config.repair_schema import needs_quotes as _needs_quotes
from traindeck.backend.config.repair_schema import removed_keys as _removed
from traindeck.backend.config.repair_schema import show as _show
from traindeck.backend.config.repair_schema import suggest_key as _suggest_key
from traindeck.backend.config.repair_tree import Entry as _Entry
from traindeck.backend.config.repair_tree import KeyMap as _Map
from traindeck.backend.config.repair_tree import Unparseable as _Unparseable
from traindeck.backend.config.repair_tree import flattened as _flattened
from traindeck.backend.config.repair_tree import plain as _plain
from traindeck.backend.config.repair_tree import yaml_tree as _yaml_tree
from traindeck.backend.config.schema import FieldSpec, Section, fields_of
from traindeck.backend.config.source import Format, Kind, detect_kind
from traindeck.backend.config.tolerant_json import TolerantJsonReader, apply_edits
from traindeck.backend.config.validate import check_value, root_section


@dataclass
class RepairResult:
    """text_out: the repaired text (None when the text cannot be parsed even after the fixes); changes: what was
    changed, one line each ("line 4: moved zero_stage under deepspeed_config"); problems: what could not be fixed
    without guessing (the config still needs a human there); notes: what the repair left unexamined (unknown keys
    past the first few are not searched for misspellings), neither a change nor a problem."""

    text_out: str | None
    changes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    format: Format = "yaml"
    kind: Kind | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the text could be repaired with nothing left ambiguous."""
        return self.text_out is not None and not self.problems

    @property
    def changed(self) -> bool:
        return bool(self.changes)



# ------------------------------------------------------------------------------------------ repairing the tree


class _Repairer:
    def __init__(self) -> None:
        self.changes: list[tuple[int, str]] = []
        self.problems: list[tuple[int, str]] = []
        self.structural = False
        # Minimal text edits for changes that keep the structure: (start, end, replacement).
        self.edits: list[tuple[int, int, str]] = []
        self.fmt: Format = "yaml"
        self._moved: list[_Entry] = []  # entries moved out of the level _follow_headers is walking
        self.budget = KeyBudget()  # the unknown keys searched for a misspelt known key

    def change(self, line: int, text: str) -> None:
        self.changes.append((line, f"line {line}: {text}"))

    def problem(self, line: int, text: str) -> None:
        self.problems.append((line, f"line {line}: {text}"))

    # -- one mapping level

    def repair(self, node: _Map, section: type[Section] | None, path: PathT) -> None:
        if section is not None:
            self._follow_headers(node, section, path)
            self._move_down(node, section, path)
            self._rename_keys(node, section, path)
        self._duplicates(node, path)
        for entry in node.entries:
            child = _child_section(section, entry.key)
            if isinstance(entry.value, _Map):
                self.repair(entry.value, child, path + (entry.key,))
            elif section is not None and isinstance(entry.key, str):
                spec = fields_of(section).get(entry.key)
                if spec is None and entry.key in section.DEPRECATED:
                    spec = fields_of(section).get(section.DEPRECATED[entry.key])
                if spec is not None:
                    self._fix_value(entry, spec, path + (entry.key,))
        if section is not None:
            # Last, once the values inside are repaired: old key names -> new ones (the new key's value check
            # decides whether a plain rename keeps the meaning).
            present = {e.key for e in node.entries}
            for entry in list(node.entries):
                if isinstance(entry.key, str) and entry.key in section.DEPRECATED:
                    self._deprecated(node, entry, section, path, present)

    def _follow_headers(self, node: _Map, section: type[Section], path: PathT) -> None:
        """Keys that follow an empty section header in the text and belong to that section go under it.

        A key no description knows (a newer tool's key, say) between two keys that go under the same header goes
        there too: the text put it among that section's keys. One left after the last of them is named when this
        level refuses unknown keys (accelerate's top level), since staying there the file would be refused.
        """
        chain: list[tuple[_Entry, type[Section], PathT]] = []  # open headers, outermost first
        kept: list[_Entry] = []
        pending: list[tuple[_Entry, _Entry]] = []  # (unknown entry, the innermost open header when it was read)
        for entry in node.entries:
            key = entry.key
            if not chain:
                self._unplaced(pending, section, path)
                kept.append(entry)
                self._maybe_open(entry, section, path, chain)
                continue
            homes: list[int] = [i for i in range(len(chain) - 1, -1, -1) if _knows(chain[i][1], key)]
            here = _knows(section, key)
            if len(homes) + here == 1 and homes:
                i = homes[0]
                self._place_pending(pending, chain[i], chain)
                del chain[i + 1:]
                header, header_section, header_path = chain[i]
                self._put(header, entry, header_path)
                self._maybe_open(entry, header_section, header_path, chain)
                continue
            if len(homes) + here == 1:  # the level itself: the headers above are closed
                chain.clear()
                self._unplaced(pending, section, path)
                kept.append(entry)
                self._maybe_open(entry, section, path, chain)
                continue
            if homes or here:
                places = [format_path(chain[i][2]) for i in homes] + (["the top level" if not path else
                                                                       format_path(path)] if here else [])
                self.problem(entry.line, f"'{key}' could belong under {' or '.join(places)}; left where it is "
                                         "(indent it under the one you mean)")
                kept.append(entry)
                continue
            # Known nowhere along the chain: a misspelt key of the innermost header (or of this level)?
            fixes = [(i, _suggest_key(chain[i][1], key, self.budget)) for i in range(len(chain) - 1, -1, -1)]
            fixes = [(i, hint) for i, hint in fixes if hint]
            level_hint = _suggest_key(section, key, self.budget)
            if len(fixes) == 1 and not level_hint and isinstance(key, str):
                i, hint = fixes[0]
                self._place_pending(pending, chain[i], chain)
                del chain[i + 1:]
                header, header_section, header_path = chain[i]
                self.change(entry.line, f"key '{key}' -> '{hint}' (a key of {format_path(header_path)})")
                self.structural = True
                entry.key = hint
                self._put(header, entry, header_path)
                self._maybe_open(entry, header_section, header_path, chain)
                continue
            kept.append(entry)  # left for the next steps (a deeper section, a typo at this level, or unknown)
            if isinstance(key, str) and not level_hint and not fixes and key not in _removed(section) \
                    and not _homes(section, key):
                pending.append((entry, chain[-1][0]))
        self._unplaced(pending, section, path)
        moved = {id(e) for e in self._moved}
        node.entries = [e for e in kept if id(e) not in moved]
        self._moved.clear()

    def _place_pending(self, pending: list[tuple[_Entry, _Entry]], target: tuple[_Entry, type[Section], PathT],
                       chain: list[tuple[_Entry, type[Section], PathT]]) -> None:
        """The next key goes under `target`: unknown keys read while `target` was the innermost open header sat
        among its keys, and follow them; others (read under a deeper header) are between two sections: named."""
        header, _section, header_path = target
        for entry, open_header in pending:
            if open_header is header:
                self._put(header, entry, header_path, unknown=True)
                self._moved.append(entry)
            else:
                self._unplaced([(entry, open_header)], None, header_path)
        pending.clear()

    def _unplaced(self, pending: list[tuple[_Entry, _Entry]], section: type[Section] | None, path: PathT) -> None:
        """Unknown keys after the last key of a flattened section: staying at a level that refuses unknown keys
        the file is refused; moving them would be a guess. Named either way when the level refuses them."""
        for entry, header in pending:
            if section is None or section.UNKNOWN == "error":
                self.problem(entry.line, f"'{entry.key}' is a key traindeck does not know, after the keys of "
                                         f"{header.key} that lost their indentation; indent it under {header.key} "
                                         "if it belongs there, or remove it")
        pending.clear()

    def _maybe_open(self, entry: _Entry, section: type[Section], path: PathT,
                    chain: list[tuple[_Entry, type[Section], PathT]]) -> None:
        child = _child_section(section, entry.key)
        if entry.empty and child is not None:
            chain.append((entry, child, path + (entry.key,)))

    def _put(self, header: _Entry, entry: _Entry, header_path: PathT, unknown: bool = False) -> None:
        if not isinstance(header.value, _Map):
            header.value = _Map()
        header.value.entries.append(entry)
        header.empty = False
        self.structural = True
        self.change(entry.line, f"moved {entry.key} under {format_path(header_path)}" + (
            " (a key traindeck does not know: it sat among that section's keys)" if unknown else ""))

    def _move_down(self, node: _Map, section: type[Section], path: PathT) -> None:
        """A key this level does not know, that exactly one section below it knows, goes there."""
        kept: list[_Entry] = []
        for entry in node.entries:
            key = entry.key
            if _knows(section, key) or not isinstance(key, str):
                kept.append(entry)
                continue
            homes = _homes(section, key)
            if len(homes) == 1:
                target = self._container(node, kept, homes[0], entry)
                if target is not None:
                    existing = target.get(key)
                    if existing is not None and _plain(existing.value) != _plain(entry.value):
                        self.problem(entry.line, f"'{key}' is a key of {format_path(path + homes[0])}, which "
                                                 f"already has '{key}' (line {existing.line}) with another value; "
                                                 "keep one")
                        kept.append(entry)
                        continue
                    if existing is not None:
                        self.change(entry.line, f"removed '{key}': {format_path(path + homes[0])} already has it "
                                                f"with the same value")
                    else:
                        target.entries.append(entry)
                        self.change(entry.line, f"moved {key} under {format_path(path + homes[0])}")
                    self.structural = True
                    continue
                kept.append(entry)
                continue
            if len(homes) > 1:
                places = ", ".join(format_path(path + h) for h in homes)
                self.problem(entry.line, f"'{key}' is a key of several sections ({places}); left where it is "
                                         "(move it under the one you mean)")
            kept.append(entry)
        node.entries = kept

    def _container(self, node: _Map, kept: list[_Entry], rel: PathT, entry: _Entry) -> _Map | None:
        """The mapping at `rel` below `node`, created when missing; None (and a problem) when something else is
        in the way."""
        current = node
        for depth, part in enumerate(rel):
            found = current.get(part)
            if found is None and current is node:
                found = next((e for e in kept if e.key == part), None)
            if found is None:
                found = _Entry(key=part, value=_Map(), line=entry.line, origin=())
                current.entries.append(found)
            elif found.value is None or (isinstance(found.value, _Map)):
                if found.value is None:
                    found.value = _Map()
                    found.empty = False
            else:
                self.problem(entry.line, f"'{entry.key}' belongs under {format_path(rel[:depth + 1])}, but that is "
                                         f"not a section here (line {found.line}); left where it is")
                return None
            current = found.value
        return current

    def _rename_keys(self, node: _Map, section: type[Section], path: PathT) -> None:
        """Misspelt keys -> the one close known key; deprecated keys -> their new names."""
        present = {e.key for e in node.entries}
        for entry in list(node.entries):
            key = entry.key
            if not isinstance(key, str):
                continue
            if key in section.DEPRECATED or key in fields_of(section) or key in _removed(section):
                continue
            hint = _suggest_key(section, key, self.budget)
            if hint is None:
                several = _close(key, list(fields_of(section))) if self.budget.allows(key) else []
                if len(several) > 1:
                    self.problem(entry.line, f"unknown key '{key}' is close to several keys ("
                                             f"{', '.join(several)}); left as it is")
                continue
            if hint in present:
                self.problem(entry.line, f"unknown key '{key}' looks like '{hint}', which is also set; keep one")
                continue
            self.change(entry.line, f"key '{key}' -> '{hint}'" + (f" (in {format_path(path)})" if path else ""))
            self._rename(entry, hint)
            present.add(hint)

    def _deprecated(self, node: _Map, entry: _Entry, section: type[Section], path: PathT, present: set[Any]) -> None:
        old, new = entry.key, section.DEPRECATED[entry.key]
        if not new:
            return  # nothing replaces it: the checker says so; not a repair
        if "." in new:
            self._deprecated_elsewhere(node, entry, section, path, new)
            return
        if new in present:
            clash = getattr(section, "DEPRECATED_CLASH", "")
            if clash:  # the tool refuses the two together: which one is meant is the user's call
                self.problem(entry.line, f"'{old}' is the old name of '{new}', which is also set ({clash}); keep one")
            else:  # the tool uses the new key and ignores the old one: removing it changes nothing
                self.change(entry.line, f"removed the deprecated key '{old}': '{new}' is also set and wins")
                node.entries.remove(entry)
                self.structural = True
            return
        spec = fields_of(section).get(new)
        value = _plain(entry.value)
        if spec is not None and not [f for f in check_value(spec, value, path + (new,)) if f[0] == "error"]:
            self.change(entry.line, f"deprecated key '{old}' -> '{new}'")
            self._rename(entry, new)
            present.add(new)
            return
        # An old on/off switch replaced by a choice that names it (accelerate's fp16: true -> mixed_precision: fp16).
        if spec is not None and spec.kind == "choice" and isinstance(value, bool) and old in spec.choices:
            replacement = old if value else ("no" if "no" in spec.choices else None)
            if replacement is not None:
                self.change(entry.line, f"deprecated key '{old}: {_show(value)}' -> '{new}: {replacement}'")
                self._rename(entry, new)
                entry.value = replacement
                if entry.value_span is not None:
                    self.edits.append((entry.value_span[0], entry.value_span[1],
                                       self._value_text(replacement, entry.quote)))
                else:
                    self.structural = True
                present.add(new)
                return
        # An old on/off switch replaced by a section with a device (DeepSpeed's cpu_offload -> offload_optimizer).
        if spec is not None and spec.kind == "section" and spec.section is not None and isinstance(value, bool) \
                and "device" in fields_of(spec.section):
            self.structural = True
            if value:
                self.change(entry.line, f"deprecated key '{old}: true' -> '{new}: {{device: cpu}}'")
                entry.key, entry.value = new, _Map([_Entry("device", "cpu", entry.line)])
                present.add(new)
            else:
                self.change(entry.line, f"removed the deprecated key '{old}: false' (no {new} is the same)")
                node.entries.remove(entry)
            return
        self.problem(entry.line, f"'{old}' is deprecated: '{new}' replaces it, but its value has another form; "
                                 "rewrite it by hand")

    def _deprecated_elsewhere(self, node: _Map, entry: _Entry, section: type[Section], path: PathT, new: str) -> None:
        """An old key whose new name lives in a section ("dynamo_backend" -> "dynamo_config.dynamo_backend")."""
        parts = tuple(new.split("."))
        target_section: type[Section] | None = section
        for part in parts[:-1]:
            target_section = _child_section(target_section, part)
        spec = fields_of(target_section).get(parts[-1]) if target_section is not None else None
        value = _plain(entry.value)
        holder = node.get(parts[0])
        if spec is None or [f for f in check_value(spec, value, path + parts) if f[0] == "error"]:
            self.problem(entry.line, f"'{entry.key}' is deprecated: set {new} instead (by hand: the value needs "
                                     "another form)")
            return
        if holder is not None and not (holder.empty or (isinstance(holder.value, _Map) and not holder.value.entries)):
            self.problem(entry.line, f"'{entry.key}' is deprecated and {parts[0]} is also set (line {holder.line}); "
                                     f"set {new} there and remove '{entry.key}'")
            return
        node.entries.remove(entry)
        target = self._container(node, node.entries, parts[:-1], entry)
        if target is None:
            node.entries.append(entry)
            return
        moved = _Entry(key=parts[-1], value=entry.value, line=entry.line, origin=entry.origin)
        target.entries.append(moved)
        self.structural = True
        self.change(entry.line, f"deprecated key '{entry.key}' -> '{new}'")

    def _rename(self, entry: _Entry, new: str) -> None:
        entry.key = new
        if entry.key_span is not None:
            self.edits.append((entry.key_span[0], entry.key_span[1], self._key_text(new)))
        else:
            self.structural = True

    def _duplicates(self, node: _Map, path: PathT) -> None:
        seen: dict[Any, _Entry] = {}
        for entry in node.entries:
            first = seen.get(entry.key)
            if first is not None:
                where = format_path(path + (entry.key,))
                if _plain(first.value) == _plain(entry.value):
                    self.change(entry.line, f"removed '{where}', set twice to the same value (also line {first.line})")
                    node.entries.remove(entry)
                    self.structural = True
                    return self._duplicates(node, path)
                self.problem(entry.line, f"'{where}' is set twice (also line {first.line}) with different values; "
                                         "keep the one you mean")
            else:
                seen[entry.key] = entry

    # -- values

    def _fix_value(self, entry: _Entry, spec: FieldSpec, path: PathT) -> None:
        value = entry.value
        errors = [f for f in check_value(spec, value, path) if f[0] == "error"]
        if not errors:
            return
        new = _corrected(value, spec)
        if new is _NOTHING:
            if isinstance(value, str) and spec.kind == "choice":
                several = _close_choices(value, [c for c in spec.choices if isinstance(c, str)])
                if len(several) > 1:
                    self.problem(entry.line, f"{format_path(path)}: {_show(value)} is not allowed and is close to "
                                             f"several values ({', '.join(repr(c) for c in several)}); left as it is")
            return
        if [f for f in check_value(spec, new, path) if f[0] == "error"]:
            return
        self.change(entry.line, f"{format_path(path)}: {_show(value)} -> {_show(new)}")
        entry.value = new
        if entry.value_span is not None:
            self.edits.append((entry.value_span[0], entry.value_span[1], self._value_text(new, entry.quote)))
        else:
            self.structural = True

    # -- spelling values in the text

    def _value_text(self, value: Any, quote: str | None) -> str:
        if self.fmt == "json":
            return json.dumps(value, ensure_ascii=False)
        if isinstance(value, str):
            if quote == '"':
                return json.dumps(value, ensure_ascii=False)
            if quote == "'" or _needs_quotes(value):
                return "'" + value.replace("'", "''") + "'"
            return value
        return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()

    def _key_text(self, key: str) -> str:
        if self.fmt == "json":
            return json.dumps(key, ensure_ascii=False)
        return key if not _needs_quotes(key) else "'" + key.replace("'", "''") + "'"



# ------------------------------------------------------------------------------------------ entry point


def _undescribed(kind: Kind | None, text: str, budget: KeyBudget) -> Callable[[PathT], bool] | None:
    try:
        root = root_section(kind or ("deepspeed" if text.lstrip("\ufeff \t\r\n").startswith("{") else "accelerate"))
    except ModuleNotFoundError:
        return None
    return undescribed_below(root, budget)


def repair_text(text: str, file: str | None = None, *, kind: Kind | None = None, fmt: Format | None = None
                ) -> RepairResult:
    """Repair a pasted accelerate YAML or DeepSpeed JSON. See the module's description."""
    if fmt is None:
        lower = (file or "").lower()
        fmt = "json" if lower.endswith(".json") else "yaml" if lower.endswith((".yaml", ".yml")) else (
            "json" if text.lstrip("\ufeff \t\r\n").startswith("{") else "yaml")
    if len(text) > MAX_BYTES:  # pasted or opened text: the bound `config check` and `config fix` read files with
        return RepairResult(None, [], [f"cannot repair: {too_big(len(text.encode('utf-8', 'replace')))}"], fmt, kind)
    fixer = _Repairer()
    fixer.fmt = fmt
    syntax_edits: list[tuple[int, int, str, str]] = []
    reader: TolerantJsonReader | None = None
    flattened = False
    try:
        if fmt == "json":
            reader = TolerantJsonReader(text, plain_below=_undescribed(kind, text, fixer.budget))
            tree = reader.read()
            syntax_edits = reader.edits
        else:
            try:
                tree = _yaml_tree(text)
            except _Unparseable as first:
                flat = None if first.refused else _flattened(text)
                if flat is None or flat == text:
                    raise first
                try:
                    tree = _yaml_tree(flat)
                except _Unparseable:
                    raise first from None
                flattened = True
    except _Unparseable as exc:
        return RepairResult(None, [], [f"cannot repair: {exc.describe()}"], fmt, kind)
    for start, _end, _rep, what in syntax_edits:
        fixer.changes.append((reader.line_of(start) if reader is not None else 1, what))
    # The kind is told by the top-level keys alone: no need to turn the whole tree into dicts for it.
    top = {e.key: e.value if not isinstance(e.value, (_Map, list)) else None for e in tree.entries}
    kind = kind or detect_kind(top, fmt)
    if flattened:
        fixer.structural = True
        fixer.change(1, "the indentation was inconsistent (YAML could not read it): re-nested every key under "
                        "the section it belongs to")
    try:
        section: type[Section] | None = root_section(kind, top)  # top-level scalars tell a SageMaker config
    except ModuleNotFoundError:
        section = None
        fixer.problems.append((0, f"the {kind} config description is not available: only syntax was repaired"))
    if section is not None:
        fixer.repair(tree, section, ())
    changes = [c for _, c in sorted(fixer.changes, key=lambda c: c[0])]
    problems = [p for _, p in sorted(fixer.problems, key=lambda p: p[0])]
    skipped = len(fixer.budget.skipped)
    notes = [f"{skipped:,} more unknown key{'s' if skipped != 1 else ''} left as written (no suggestions past the "
             f"first {fixer.budget.limit})"] if skipped else []
    if fixer.structural:
        plain = _plain(tree)
        if fmt == "json":
            out = json.dumps(plain, indent=2, ensure_ascii=False) + "\n"
        else:
            out = yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=False)
    else:
        edits = list(syntax_edits) + [(s, e, r, "") for s, e, r in fixer.edits]
        out = apply_edits(text, [(s, e, r) for s, e, r, _ in edits])
    return RepairResult(out, changes, problems, fmt, kind, notes)

