"""DeepSpeed's loosely read config keys, found by watching DeepSpeedConfig read a dict (part of snapshot_gen).

The top level of ds_config.json and sections such as aio, checkpoint or data_efficiency are not pydantic models:
DeepSpeedConfig reads them key by key with get_scalar_param / dict.get and ignores the rest. Running it on a dict
that records every key it is asked for (and the default it is asked with) lists those keys; a section it copies or
loops over whole is "passed-on" (read later, elsewhere). Runs in the training interpreter (imports deepspeed).
"""

from __future__ import annotations

from typing import Any


class _Reads:
    """Every (section path, key, default) DeepSpeedConfig asked a recording dict for."""

    def __init__(self) -> None:
        self.keys: dict[str, dict[str, Any]] = {}
        self.passed_on: set[str] = set()

    def whole(self, path: str) -> None:
        if path:  # DeepSpeedConfig copies the whole file first: only nested sections count
            self.passed_on.add(path)
            self.keys.setdefault(path, {})

    def saw(self, path: str, key: Any, default: Any = ...) -> None:
        if not isinstance(key, str):
            return
        known = self.keys.setdefault(path, {})
        if key not in known or (known[key] is ... and default is not ...):
            known[key] = default


class _Keys:
    """What a recording dict's keys() returns: `"x" in d.keys()` is a read too."""

    def __init__(self, owner: _Recording) -> None:
        self._owner = owner

    def __contains__(self, key: Any) -> bool:
        self._owner._reads.saw(self._owner._path, key)
        return dict.__contains__(self._owner, key)

    def __iter__(self) -> Any:
        return iter(dict.keys(self._owner))

    def __len__(self) -> int:
        return dict.__len__(self._owner)


class _Recording(dict):
    def __init__(self, reads: _Reads, path: str, content: dict[str, Any] | None = None) -> None:
        super().__init__(content or {})
        self._reads = reads
        self._path = path

    def get(self, key: Any, default: Any = None) -> Any:
        self._reads.saw(self._path, key, default)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._reads.saw(self._path, key)
        return super().__getitem__(key)

    def __contains__(self, key: Any) -> bool:
        self._reads.saw(self._path, key)
        return super().__contains__(key)

    def keys(self) -> Any:
        return _Keys(self)

    # Taking every key (a copy handed on, a loop over the items): the section's keys are used beyond what
    # DeepSpeedConfig looks at, so an unknown one cannot be called ignored.
    def __copy__(self) -> _Recording:
        self._reads.whole(self._path)
        return _Recording(self._reads, self._path, dict(self))

    def copy(self) -> _Recording:
        return self.__copy__()

    def items(self) -> Any:
        self._reads.whole(self._path)
        return super().items()

    def values(self) -> Any:
        self._reads.whole(self._path)
        return super().values()

    def __iter__(self) -> Any:
        self._reads.whole(self._path)
        return super().__iter__()


def trace_loose_reads() -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Run DeepSpeedConfig on recording dicts: which keys it reads where, with their defaults.

    One probe per key read: the key is given an empty recording dict; when DeepSpeed then reads keys inside it, it
    is a section, probed the same way in turn (a scalar key given a dict may trip DeepSpeed: each probe is alone).
    Also returns the sections DeepSpeedConfig takes whole (copies or loops over): their keys are passed on."""
    from deepspeed.runtime.config import DeepSpeedConfig

    base = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1}

    def probe(section: str | None, enabled: bool = False) -> tuple[dict[str, dict[str, Any]], set[str]]:
        reads = _Reads()
        param = _Recording(reads, "", dict(base))
        if section:
            holder = param
            parts = section.split(".")
            for depth, part in enumerate(parts):
                child = _Recording(reads, ".".join(parts[:depth + 1]), {"enabled": True} if enabled else None)
                dict.__setitem__(holder, part, child)
                holder = child
        try:
            DeepSpeedConfig(param)
        except Exception:  # noqa: BLE001 - a probe may trip an assertion after it has read what it reads
            if enabled and section:
                # Switched on, it wants keys the probe cannot make up (curriculum_learning's metrics): what it
                # reads then is unseen, so it is taken as handed on.
                reads.whole(section)
        return reads.keys, reads.passed_on

    keys, passed_on = probe(None)
    todo = [key for key in keys.get("", {}) if key not in base]
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen or path.count(".") > 3:
            continue
        seen.add(path)
        found, whole = probe(path)
        passed_on |= whole
        if path not in found:
            continue
        if "enabled" in found[path]:  # some sections are only read (or handed on) when switched on
            more, whole = probe(path, enabled=True)
            passed_on |= whole
            for where, inner in more.items():
                found.setdefault(where, {})
                keys.setdefault(where, {})
                for key, default in inner.items():
                    found[where].setdefault(key, default)
        for where, inner in found.items():
            keys.setdefault(where, {})
            for key, default in inner.items():
                known = keys.setdefault(where, {})
                if key not in known or known[key] is ...:
                    known[key] = default
        todo += [f"{path}.{key}" for key in found[path]]
    return keys, passed_on
