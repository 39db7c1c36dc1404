"""Did-you-mean suggestions stay bounded: a file with hundreds of unknown keys gets its first few listed (each
searched once for the key it may misspell) and the rest in one line, in `config check` and in `config fix`."""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Iterator

import pytest

from traindeck.backend.config import (
    check_document,
    has_errors,
    parse_text,
    repair_schema,
    repair_text,
    validate,
)
from traindeck.backend.config.validate import SUGGEST_LIMIT

HEAD = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Each difflib search, counted by the word searched for (the caches emptied first, so each test counts its
    own searches)."""
    counted: Counter[str] = Counter()
    real = difflib.get_close_matches

    def counting(word, possibilities, *args, **kwargs):  # type: ignore[no-untyped-def]
        counted[word] += 1
        return real(word, possibilities, *args, **kwargs)

    validate._suggest_in.cache_clear()
    repair_schema._close_in.cache_clear()
    monkeypatch.setattr(difflib, "get_close_matches", counting)
    yield counted


def _unknown(count: int) -> dict[str, int]:
    return {f"custom_setting_{i:04d}": i for i in range(count)}


def _about_unknown(text: str) -> list[str]:
    doc = parse_text(text, file="ds.json")
    return [m.format() for m in check_document(doc) if "unknown key" in m.message]


def test_500_unknown_keys_at_the_top_give_the_first_few_and_one_line(searches: Counter[str]) -> None:
    lines = _about_unknown(json.dumps({**HEAD, **_unknown(500)}, indent=2))
    assert len(lines) == SUGGEST_LIMIT + 1
    assert "unknown key 'custom_setting_0000' (DeepSpeed ignores it)" in lines[0]
    assert lines[-1].endswith("warning: custom_setting_0020: ... and 480 more unknown keys (no suggestions past "
                              f"the first {SUGGEST_LIMIT})")
    assert sum(searches.values()) <= SUGGEST_LIMIT


def test_500_unknown_keys_in_a_refusing_section_stay_errors(searches: Counter[str]) -> None:
    text = json.dumps({**HEAD, "zero_optimization": {"stage": 2, **_unknown(500)}}, indent=2)
    doc = parse_text(text, file="ds.json")
    messages = [m for m in check_document(doc) if "unknown key" in m.message]
    assert len(messages) == SUGGEST_LIMIT + 1
    assert {m.severity for m in messages} == {"error"} and has_errors(messages)
    assert messages[-1].path == "zero_optimization.custom_setting_0020"
    assert messages[-1].message.startswith("... and 480 more unknown keys")
    assert sum(searches.values()) <= SUGGEST_LIMIT


def test_the_limit_counts_unknown_keys_across_sections(searches: Counter[str]) -> None:
    data = {**HEAD, **_unknown(15), "zero_optimization": {"stage": 2, **{f"zero_custom_{i}": i for i in range(15)}}}
    doc = parse_text(json.dumps(data, indent=2), file="ds.json")
    messages = [m for m in check_document(doc) if "unknown key" in m.message]
    assert len(messages) == SUGGEST_LIMIT + 1  # 15 warnings and 5 errors listed, then the errors' summary line
    assert [m.severity for m in messages].count("warning") == 15
    assert [(m.severity, m.path, m.message) for m in messages if m.message.startswith("...")] == [
        ("error", "zero_optimization.zero_custom_5", f"... and 10 more unknown keys (no suggestions past the first "
                                                     f"{SUGGEST_LIMIT})")]
    assert sum(searches.values()) <= SUGGEST_LIMIT


def test_a_few_unknown_keys_each_get_their_message() -> None:
    lines = _about_unknown(json.dumps({**HEAD, **_unknown(SUGGEST_LIMIT - 1), "gradient_clippng": 1.0}, indent=2))
    assert len(lines) == SUGGEST_LIMIT
    assert not [line for line in lines if "more unknown keys" in line]
    assert "did you mean 'gradient_clipping'?" in lines[-1]


def test_a_word_is_searched_once_for_the_check_and_the_repair(searches: Counter[str]) -> None:
    text = json.dumps({**HEAD, "gradient_clippng": 1.0}, indent=2)
    assert any("did you mean 'gradient_clipping'?" in line for line in _about_unknown(text))
    result = repair_text(text, file="ds.json")
    assert any("'gradient_clippng' -> 'gradient_clipping'" in change for change in result.changes)
    assert searches["gradient_clippng"] == 1
    assert result.notes == []


def test_repair_of_500_unknown_keys_searches_the_first_few(searches: Counter[str]) -> None:
    text = json.dumps({**HEAD, "zero_optimization": {"stage": 2, **_unknown(250)}, **_unknown(250)}, indent=2)
    result = repair_text(text, file="ds.json")
    assert result.text_out is not None and not result.problems
    assert len(set(searches)) <= SUGGEST_LIMIT  # the first 20 words; each asked of a few sections at most
    assert sum(searches.values()) <= 4 * SUGGEST_LIMIT
    assert result.notes == [f"230 more unknown keys left as written (no suggestions past the first {SUGGEST_LIMIT})"]


def test_a_typo_among_the_first_keys_is_still_repaired() -> None:
    text = json.dumps({**HEAD, "gradient_clippng": 1.0, **_unknown(100)}, indent=2)
    result = repair_text(text, file="ds.json")
    assert any("'gradient_clippng' -> 'gradient_clipping'" in change for change in result.changes)
    assert result.notes and result.notes[0].startswith("81 more unknown keys")
