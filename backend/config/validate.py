"""Checking configs: syntax, each key against its section's description, then cross-field rules.

Two layers, both producing `Message`s located at file:line:column:
  1. `check_values`: walks the data against the Section models (types, ranges, allowed values with the
     nearest valid value suggested, unknown keys with the likely intended key, deprecated keys).
  2. rules: functions registered per config kind with `@rule("deepspeed")` / `@rule("accelerate")` that see
     the whole context (the accelerate config and the DeepSpeed config in play together, the world size) and
     catch what DeepSpeed and accelerate accept silently or only fail on minutes later inside each rank.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traindeck.backend.config import referenced
from traindeck.backend.config.messages import Message, PathT, Severity, format_path, sort_messages
from traindeck.backend.config.schema import FieldSpec, Section, fields_of
from traindeck.backend.config.source import Kind, SourceDocument, load_file

Finding = tuple[Severity, PathT, str]


@dataclass
class RuleContext:
    """What a rule may look at. `accelerate`/`deepspeed` are the two configs in play (either may be None)."""

    kind: Kind
    data: dict[str, Any]
    accelerate: dict[str, Any] | None = None
    deepspeed: dict[str, Any] | None = None
    # Processes in the job: from --world-size, else from the accelerate config; None when unknown.
    world_size: int | None = None
    # True: the HF Trainer (or accelerate's integration) fills "auto" values; False: a plain script under the
    # deepspeed launcher; None: not known (rules then say both).
    hf_trainer: bool | None = None
    # For cross-file findings: where the DeepSpeed config came from, when it is another file.
    deepspeed_file: str | None = None
    # Who fills the DeepSpeed config's "auto" values (auto_fill.Consumer: hf_trainer, accelerate, integration,
    # plain) and what says so ("--hf-trainer", "the accelerate config x.yaml uses it"); None: only the config can tell.
    consumer: str | None = None
    consumer_why: str = ""
    extras: dict[str, Any] = field(default_factory=dict)


Rule = Callable[[RuleContext], Iterable[Finding]]
_RULES: dict[Kind, list[Rule]] = {"accelerate": [], "deepspeed": []}

# The root section of each kind, and the modules whose import registers the kind's rules.
_ROOTS = {
    "accelerate": ("traindeck.backend.config.accelerate_schema", "AccelerateConfig"),
    "deepspeed": ("traindeck.backend.config.deepspeed_schema", "DeepSpeedConfig"),
}
_RULE_MODULES = {
    "accelerate": "traindeck.backend.config.accelerate_rules",
    "deepspeed": "traindeck.backend.config.deepspeed_rules",
}


def rule(kind: Kind) -> Callable[[Rule], Rule]:
    """Register a cross-field rule for one kind of config."""

    def register(fn: Rule) -> Rule:
        _RULES[kind].append(fn)
        return fn

    return register


def root_section(kind: Kind, data: Any = None) -> type[Section]:
    """The description of a whole config of `kind`; given the data, the one the tool reads it with (accelerate
    reads a SageMaker config with another set of keys)."""
    module_name, attr = _ROOTS[kind]
    module = importlib.import_module(module_name)
    if data is not None and hasattr(module, "root_for"):
        chosen: type[Section] = module.root_for(data)
        return chosen
    section: type[Section] = getattr(module, attr)
    return section


def _load_rules(kind: Kind) -> list[Rule]:
    try:
        importlib.import_module(_RULE_MODULES[kind])
    except ModuleNotFoundError as exc:
        if exc.name != _RULE_MODULES[kind]:
            raise
    return _RULES[kind]


# ------------------------------------------------------------------------------------------ values

# Unknown keys in one file that each get their own message (and a did-you-mean search). A real config has a few; a
# file with thousands (a generated one, a paste of the wrong file) would otherwise get a line and a difflib search
# per key: the rest are counted in one line per severity instead.
SUGGEST_LIMIT = 20


@dataclass
class UnknownKeys:
    """The unknown keys of one file seen so far: `listed` got their own message; past `limit`, each severity's
    further keys are counted (with the path of the first, where the summary line points)."""

    limit: int = SUGGEST_LIMIT
    listed: int = 0
    rest: dict[Severity, tuple[PathT, int]] = field(default_factory=dict)

    def take(self, severity: Severity, path: PathT) -> bool:
        """True when the key at `path` gets its own message; otherwise it is counted in the summary."""
        if self.listed < self.limit:
            self.listed += 1
            return True
        first, count = self.rest.get(severity, (path, 0))
        self.rest[severity] = (first, count + 1)
        return False

    def summary(self) -> list[Finding]:
        """One line per severity for the keys not listed."""
        return [(severity, first, f"... and {count:,} more unknown key{'s' if count != 1 else ''} (no suggestions "
                                  f"past the first {self.limit})") for severity, (first, count) in self.rest.items()]


def check_values(data: dict[str, Any], section: type[Section], path: PathT = (),
                 unknown: UnknownKeys | None = None) -> list[Finding]:
    """Every key of `data` against `section`: unknown and deprecated keys, types, ranges, allowed values.

    `unknown` carries the count of unknown keys across the sections of one file; without it this call starts one
    and ends its findings with the summary of the keys past the limit."""
    if unknown is None:
        unknown = UnknownKeys()
        return check_values(data, section, path, unknown) + unknown.summary()
    findings: list[Finding] = []
    specs = fields_of(section)
    for key, value in data.items():
        here = path + (key,)
        if key in section.REMOVED:
            findings.append(("error", here, f"'{key}' is no longer supported: {section.REMOVED[key]}"))
            continue
        if key in section.DEPRECATED:
            new = section.DEPRECATED[key]
            own = specs.get(str(key))  # declared when the old value has another form than the new key's
            if not new:
                findings.append(("warning", here, f"'{key}' is deprecated and has no effect any more"))
                continue
            new = _spelling_in(new, data, specs)
            if new in data and section.DEPRECATED_CLASH:
                findings.append(("error", here, f"'{key}' is the old name of '{new}', which is also set: "
                                                f"{section.DEPRECATED_CLASH}"))
            elif new in data:
                findings.append(("warning", here, f"'{key}' is the old name of '{new}', which is also set: '{new}' wins"))
            elif own is not None:
                findings.append(("warning", here, f"'{key}' is deprecated: {own.help}"))
            else:
                findings.append(("warning", here, f"'{key}' is deprecated: use '{new}' (same meaning)"))
            spec = own or specs.get(new)
            if spec is not None:
                findings += check_value(spec, value, here, unknown)
            continue
        spec = specs.get(str(key))
        if spec is None:
            severity: Severity = "note" if section.UNKNOWN == "warning" and looks_like_comment(str(key)) \
                else section.UNKNOWN
            if not unknown.take(severity, here):
                continue
            text = f"unknown key '{key}' ({section.UNKNOWN_WHY})"
            placed = section.unknown_key_hint(str(key))
            if placed:
                findings.append((section.UNKNOWN, here, f"{text}; {placed}"))
                continue
            if looks_like_comment(str(key)):
                # People annotate JSON with "_comment" / "//" keys. Where the tool ignores unknown keys that is
                # exactly what the author meant: a note, never a spelling guess ("did you mean 'comet'?").
                if section.UNKNOWN == "warning":
                    findings.append(("note", here, f"'{key}' reads as a comment: kept, and {section.UNKNOWN_WHY}"))
                else:
                    findings.append((section.UNKNOWN, here, f"{text}: a comment key is not allowed here"))
                continue
            hint = suggest(str(key), list(specs) + list(section.DEPRECATED))
            findings.append((section.UNKNOWN, here, text + (f"; did you mean '{hint}'?" if hint else "")))
            continue
        twin = _other_spelling(str(key), spec, data, specs)
        if twin is not None:
            findings.append(_spelling_clash(section, str(key), twin, here))
            continue
        if isinstance(value, bool) and key in section.RULES_WORD_BOOL:
            continue
        findings += check_value(spec, value, here, unknown)
    return findings


def _spelling_in(key: str, data: dict[str, Any], specs: dict[str, FieldSpec]) -> str:
    """The spelling of `key` that `data` uses (DeepSpeed's max_live_parameters for stage3_max_live_parameters)."""
    spec = specs.get(key)
    if spec is None or key in data:
        return key
    main = spec.alias_of or key
    for other in data:
        other_spec = specs.get(str(other))
        if other_spec is not None and (other_spec.alias_of or str(other)) == main:
            return str(other)
    return key


def _other_spelling(key: str, spec: FieldSpec, data: dict[str, Any], specs: dict[str, FieldSpec]) -> str | None:
    """Another spelling of the same key set beside `key` (reported once, on the alias)."""
    if not spec.alias_of:
        return None
    for other in data:
        other_spec = specs.get(str(other))
        if other != key and other_spec is not None and (other_spec.alias_of or str(other)) == spec.alias_of:
            return str(other)
    return None


def _spelling_clash(section: type[Section], key: str, twin: str, here: PathT) -> Finding:
    if section.UNKNOWN == "error":  # pydantic reads one spelling and refuses the other as an unknown key
        tool = {"deepspeed": "DeepSpeed"}.get(section.SNAPSHOT[0] if section.SNAPSHOT else "", "the tool")
        return ("error", here, f"'{key}' and '{twin}' are two spellings of one key; {tool} refuses them together: "
                               "keep one")
    return ("warning", here, f"'{key}' and '{twin}' are two spellings of one key: only one of them is used; keep one")


def check_value(spec: FieldSpec, value: Any, path: PathT, unknown: UnknownKeys | None = None) -> list[Finding]:
    """One value against its key's description (`unknown`: as for check_values, when the value is a section)."""
    if value is None:
        if spec.nullable or spec.kind in ("any",):
            return []
        return [("error", path, f"missing value: expected {spec.describe()}")]
    if value == "auto" and spec.kind != "str":
        return [] if spec.auto else [("error", path, f"\"auto\" is not accepted here: expected {spec.describe()}")]
    kind = spec.kind
    if kind == "section":
        if not isinstance(value, dict):
            return [("error", path, f"expected a section of keys, got {_show(value)}")]
        assert spec.section is not None
        return check_values(value, spec.section, path, unknown)
    if kind == "choice":
        if value in spec.choices and type(value) is type(_match(value, spec.choices)):
            return []
        if spec.also_text and isinstance(value, str):
            return []
        return [("error", path, f"{_show(value)} is not allowed: expected {spec.describe()}{_nearest_hint(value, spec)}")]
    if kind == "bool":
        return [] if isinstance(value, bool) else [("error", path, f"expected true or false, got {_show(value)}")]
    if kind in ("int", "float"):
        if isinstance(value, str) and spec.also_text:
            return []
        number_ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if kind == "int" and isinstance(value, float) and not value.is_integer():
            number_ok = False
        if not number_ok:
            hint = f": a number written as text; {NUMBER_AS_TEXT}" if looks_like_number(value) else ""
            return [("error", path, f"expected {spec.describe()}, got {_show(value)}{hint}")]
        return _range(spec, value, path)
    if kind == "str":
        return [] if isinstance(value, str) else [("error", path, f"expected text, got {_show(value)}")]
    if kind == "list":
        return [] if isinstance(value, list) else [("error", path, f"expected a list, got {_show(value)}")]
    if kind == "mapping":
        if not isinstance(value, dict):
            return [("error", path, f"expected a mapping, got {_show(value)}")]
        return list(_numbers_as_text(value, path))
    return []


# A number written as text: quoted, or a YAML 1.1 exponent without a decimal point (PyYAML reads 1e-4 as text).
_NUMBER_TEXT = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
NUMBER_AS_TEXT = ("write it without quotes (YAML reads an exponent without a decimal point as text: 1.0e-4 is a "
                  "number, 1e-4 is not)")


def as_dict(value: Any) -> dict[str, Any]:
    """A section as the rules read it: the mapping, or empty for anything else (a wrong type has its own finding)."""
    return value if isinstance(value, dict) else {}


def whole_number(value: Any) -> int | None:
    """A whole number as DeepSpeed and accelerate would use it (JSON's 5e8 included); None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def looks_like_number(value: Any) -> bool:
    """Text that reads as a number ("1e-4", "0.9", "100")."""
    return isinstance(value, str) and _NUMBER_TEXT.fullmatch(value.strip()) is not None


def _numbers_as_text(value: Any, path: PathT) -> Iterable[Finding]:
    """Numbers written as text inside a free-form mapping (optimizer and scheduler params, ...): the tool passes
    them on as they are, and torch's optimizers and schedulers compare them with numbers and raise TypeError."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers_as_text(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _numbers_as_text(item, path + (i,))
    elif looks_like_number(value):
        yield ("warning", path, f"{_show(value)} is text, not a number: it is passed on as text (torch's optimizers "
                                f"and schedulers then stop with a TypeError); {NUMBER_AS_TEXT}")


def _match(value: Any, choices: Sequence[Any]) -> Any:
    # `1 in (True, ...)` is True in Python; a bool choice must be matched by a bool and a number by a number.
    for choice in choices:
        if choice == value and type(choice) is type(value):
            return choice
    return object()


def _range(spec: FieldSpec, value: float, path: PathT) -> list[Finding]:
    low, high = spec.minimum, spec.maximum
    if low is not None and (value < low or (spec.exclusive_minimum and value == low)):
        return [("error", path, f"{_show(value)} is out of range: expected {spec.describe()}")]
    if high is not None and value > high:
        return [("error", path, f"{_show(value)} is out of range: expected {spec.describe()} (nearest valid: {high:g})")]
    return []


def _nearest_hint(value: Any, spec: FieldSpec) -> str:
    if isinstance(value, str):
        hint = suggest(value, [c for c in spec.choices if isinstance(c, str)])
        if hint is not None:
            return f"; did you mean '{hint}'?"
        if value.lower() in ("true", "false") and any(isinstance(c, bool) for c in spec.choices):
            return f"; write {value.lower()} without quotes"
        return ""
    numbers = [c for c in spec.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
    if isinstance(value, (int, float)) and not isinstance(value, bool) and numbers:
        nearest = min(numbers, key=lambda c: abs(c - value))
        return f" (nearest valid: {nearest})"
    return ""


_COMMENT_WORDS = {"comment", "comments", "note", "notes", "description", "desc", "doc", "remark", "remarks"}


def looks_like_comment(key: str) -> bool:
    """A key written as an annotation: "_comment", "__note__", "//", "#", "comment_zero" ..."""
    stripped = key.strip()
    if stripped.startswith(("//", "#", "_")) or not stripped:
        return True
    return stripped.lower().replace("-", "_").split("_")[0] in _COMMENT_WORDS


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate the user most likely meant: same text in another case, else a close spelling.

    Each (word, candidates) pair is searched once: the checker and the repair ask about the same keys."""
    return _suggest_in(word, tuple(c for c in candidates if isinstance(c, str)))


@functools.lru_cache(maxsize=4096)
def _suggest_in(word: str, pool: tuple[str, ...]) -> str | None:
    for candidate in pool:
        if candidate.lower() == word.lower() or candidate.lower().replace("-", "_") == word.lower().replace("-", "_"):
            return candidate
    lowered = {c.lower(): c for c in pool}
    close = difflib.get_close_matches(word.lower(), list(lowered), n=2, cutoff=0.75)
    # Two equally good guesses is no guess: only answer when one stands out.
    if len(close) == 1 or (len(close) == 2 and _ratio(word, close[0]) - _ratio(word, close[1]) > 0.05):
        return lowered[close[0]]
    return None


def _ratio(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio()


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a section"
    if isinstance(value, list):
        return "a list"
    return str(value)


# ------------------------------------------------------------------------------------------ documents


def check_document(
    doc: SourceDocument,
    *,
    world_size: int | None = None,
    hf_trainer: bool | None = None,
    deepspeed_doc: SourceDocument | None = None,
    consumer: str | None = None,
    consumer_why: str = "",
) -> list[Message]:
    """All messages for one document (syntax, values, rules), located in `doc` or in `deepspeed_doc`.

    For an accelerate config, the DeepSpeed config it uses (its deepspeed_config_file) is checked with it when
    given as `deepspeed_doc`, so cross-file rules (precision, batch arithmetic) can run. `hf_trainer` True/False is
    the older way to say consumer "hf_trainer" / "plain" (who fills "auto": see auto_fill.py).
    """
    messages = list(doc.syntax)
    if doc.data is None or doc.kind is None:
        return sort_messages(messages + list(doc.lenient))
    data = doc.data
    if consumer is None and hf_trainer is not None:
        consumer = "hf_trainer" if hf_trainer else "plain"
    messages += lenient_slips(doc, consumer)
    if hf_trainer is None and consumer is not None and (doc.kind == "deepspeed" or consumer == "hf_trainer"):
        # The rules' older flag: accelerate converts the script's optimizer for offload as the Trainer does.
        hf_trainer = consumer != "plain"
    context = RuleContext(kind=doc.kind, data=data, world_size=world_size, hf_trainer=hf_trainer,
                          consumer=consumer, consumer_why=consumer_why)
    if doc.kind == "accelerate":
        context.accelerate = data
        if deepspeed_doc is not None and deepspeed_doc.data is not None:
            context.deepspeed = deepspeed_doc.data
            context.deepspeed_file = deepspeed_doc.file
    else:
        context.deepspeed = data
    messages += [_locate(doc, deepspeed_doc, f) for f in check_values(data, root_section(doc.kind, data))]
    for fn in _load_rules(doc.kind):
        messages += [_locate(doc, deepspeed_doc, f) for f in fn(context)]
    return sort_messages(_dedupe(messages))


def lenient_slips(doc: SourceDocument, consumer: str | None) -> list[Message]:
    """JSON slips DeepSpeed's hjson reader takes (source._read_as_deepspeed_does): an error for a file the HF
    Trainer or accelerate reads (json.load: they stop there), a warning for one DeepSpeed's own launcher reads.
    Without a word on who reads it, "auto" values say the HF Trainer / accelerate (only they fill them).
    The one rule for these slips: `config check` and `presets import` both ask it."""
    if not doc.lenient:
        return []
    from traindeck.backend.config.auto_fill import auto_paths

    if consumer is None:
        consumer = "integration" if next(auto_paths(doc.data), None) is not None else "plain"
    if consumer == "plain":
        return [replace(m, severity="warning", message=m.message + "; DeepSpeed reads the file with hjson, which "
                        "takes this, but the HF Trainer and accelerate read strict JSON and stop here")
                for m in doc.lenient]
    return [replace(m, message=m.message + "; the HF Trainer and accelerate read strict JSON and stop here (only "
                    "DeepSpeed's own launcher, reading with hjson, takes it)") for m in doc.lenient]


def _locate(doc: SourceDocument, other: SourceDocument | None, finding: Finding) -> Message:
    severity, path, text = finding
    # A rule reports a path in the DeepSpeed file by prefixing it with "@deepspeed".
    if path and path[0] == "@deepspeed":
        if other is not None:
            return other.message(severity, path[1:], text)
        return Message(severity, format_path(path[1:]), text, doc.file, *doc.where(("deepspeed_config",)))
    return doc.message(severity, path, text)


def _dedupe(messages: list[Message]) -> list[Message]:
    return list(dict.fromkeys(messages))


def referenced_deepspeed_file(doc: SourceDocument, *, cwd: Path | str | None = None) -> Path | None:
    """The ds_config.json an accelerate config points at. With `cwd`: the file accelerate opens when launched from
    there (relative paths count from the working directory, see referenced.py). Without (importing a file, no
    launch in sight): beside the YAML when there is one there, else the path as written."""
    if doc.kind != "accelerate" or not isinstance(doc.data, dict):
        return None
    section = doc.data.get("deepspeed_config")
    ref = section.get("deepspeed_config_file") if isinstance(section, dict) else None
    if not isinstance(ref, str) or not ref.strip() or ref == "none":  # accelerate: "none" means no file
        return None
    if cwd is not None:
        return referenced.resolve(ref, Path(cwd))
    path = Path(ref).expanduser()
    if not path.is_absolute() and doc.file:
        beside = Path(doc.file).parent / path
        if beside.exists():
            return beside
    return path


def check_files(paths: Sequence[str | Path], *, world_size: int | None = None, hf_trainer: bool | None = None,
                consumer: str | None = None, consumer_why: str = "", cwd: Path | str | None = None) -> list[Message]:
    """`traindeck config check FILE...`: every file once; an accelerate config is checked together with the
    DeepSpeed config it references (or the one DeepSpeed JSON given beside it), and that DeepSpeed config gets
    the accelerate config's world size for its batch arithmetic unless `world_size` is given. Referenced files are
    found as accelerate launched from `cwd` (default: the current directory) finds them. Who fills "auto"
    (`consumer`, or `hf_trainer` True/False) defaults, for a DeepSpeed config an accelerate config uses, to "the
    HF Trainer or accelerate"."""
    return check_documents(load_for_check(paths), world_size=world_size, hf_trainer=hf_trainer, consumer=consumer,
                           consumer_why=consumer_why, cwd=cwd)


def load_for_check(paths: Sequence[str | Path]) -> list[SourceDocument]:
    """Each file read as `config check` reads it (JSON only DeepSpeed's own reader takes kept, its slips noted)."""
    return [load_file(p, as_deepspeed_reads=True) for p in paths]


def check_documents(docs: Sequence[SourceDocument], *, world_size: int | None = None, hf_trainer: bool | None = None,
                    consumer: str | None = None, consumer_why: str = "", cwd: Path | str | None = None
                    ) -> list[Message]:
    """check_files on files already loaded (load_for_check): a command that needs the documents for more than the
    check reads and parses each file once."""
    here = Path(cwd) if cwd is not None else Path.cwd()
    if consumer is None and hf_trainer is not None:
        consumer = "hf_trainer" if hf_trainer else "plain"
    accelerate_docs = [d for d in docs if d.kind == "accelerate"]
    deepspeed_docs = [d for d in docs if d.kind != "accelerate"]
    messages: list[Message] = []
    sizes: dict[int, int | None] = {}  # id(deepspeed doc) -> world size from the accelerate config using it
    users: dict[int, str] = {}  # id(deepspeed doc) -> the accelerate config using it
    for doc in accelerate_docs:
        messages += [doc.message(*f) for f in referenced.findings(doc.data, doc.file, here)]
        ds_doc = _deepspeed_doc_for(doc, deepspeed_docs, lone=len(accelerate_docs) == 1, cwd=here)
        if ds_doc is not None:
            sizes[id(ds_doc)] = _world_size(doc.data)
            users[id(ds_doc)] = Path(doc.file).name if doc.file else "an accelerate config"
        messages += check_document(doc, world_size=world_size, deepspeed_doc=ds_doc, consumer=consumer,
                                   consumer_why=consumer_why)
    for doc in deepspeed_docs:
        size = world_size if world_size is not None else sizes.get(id(doc))
        who, why = consumer, consumer_why
        if who is None and id(doc) in users:
            who, why = "integration", f"launched by accelerate: {users[id(doc)]} uses it"
        messages += check_document(doc, world_size=size, consumer=who, consumer_why=why)
    return sort_messages(_dedupe(messages))


def _deepspeed_doc_for(doc: SourceDocument, deepspeed_docs: list[SourceDocument], *, lone: bool,
                       cwd: Path) -> SourceDocument | None:
    """The DeepSpeed config an accelerate config uses; a referenced file not given is loaded and checked too.
    When accelerate would not find it (referenced.findings says so) but the YAML's folder has it, that one is
    checked: it is the file the user means."""
    ref = referenced_deepspeed_file(doc, cwd=cwd)
    if ref is None:
        given = [d for d in deepspeed_docs if d.kind == "deepspeed"]
        return given[0] if lone and len(given) == 1 else None
    if not ref.is_file():
        beside = next((r.beside for r in referenced.references(doc.data, doc.file, cwd)
                       if r.key[1] == "deepspeed_config_file"), None)
        if beside is None or not beside.is_file():
            return None
        ref = beside
    for candidate in deepspeed_docs:
        if candidate.file and Path(candidate.file).resolve() == ref.resolve():
            return candidate
    loaded = load_file(os.path.normpath(ref), kind="deepspeed", as_deepspeed_reads=True)  # messages name 'a/c', not 'a/b/../c'
    deepspeed_docs.append(loaded)
    return loaded
def _world_size(accelerate: Any) -> int | None:
    """Processes in the whole job as the accelerate config describes it (num_processes counts all machines)."""
    if not isinstance(accelerate, dict):
        return None
    n = accelerate.get("num_processes")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else None
