"""The site hook's step clock (launch/site_hook/_traindeck_steps.py) driven directly: what it writes per step.

The module is standard-library only and meant for the user's interpreter; here it is loaded from its file as a
fresh module per test, its clock driven by hand (enter/leave/step_ended as the torch and DeepSpeed wrappers call
them), and the rank file it writes is read back.
"""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

import pytest

HOOK = Path(__file__).resolve().parents[3] / "backend" / "launch" / "site_hook" / "_traindeck_steps.py"


@pytest.fixture
def hook(tmp_path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("_traindeck_steps_under_test", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module._TIMING = module._Timing(str(tmp_path / "steps"), "0")
    return module


def _lines(tmp_path: Path) -> list[dict]:  # type: ignore[type-arg]
    path = tmp_path / "steps" / "rank0.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _step(timing, work_s: float = 0.0) -> None:  # type: ignore[no-untyped-def]
    timing.enter("forward")
    time.sleep(work_s)
    timing.leave("forward")
    timing.enter("optimizer")
    timing.leave("optimizer")
    timing.step_ended()


def test_the_phases_add_up_to_the_step_even_when_the_bookkeeping_is_slow(hook: ModuleType, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    timing = hook._TIMING
    real = timing._memory

    def slow_memory():  # type: ignore[no-untyped-def]
        time.sleep(0.03)  # a slow /proc read: the script waits for it between its steps
        return real()

    monkeypatch.setattr(timing, "_memory", slow_memory)
    for _ in range(4):
        _step(timing, 0.005)
    timing.flush()
    steps = [line for line in _lines(tmp_path) if "step" in line]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for line in steps[1:]:
        phases = sum(line[f"{p}_ms"] for p in hook.PHASES)
        assert line["step_ms"] >= 30  # the previous step's bookkeeping is inside this step's wall time ...
        assert abs(phases - line["step_ms"]) < 0.05, line  # ... and charged to a phase ("other")
        assert line["other_ms"] >= 29, line


def test_steps_are_written_at_most_twice_a_second_and_the_first_at_once(hook: ModuleType, tmp_path: Path) -> None:
    timing = hook._TIMING
    _step(timing)
    first = _lines(tmp_path)
    assert [line.get("kind") or line["step"] for line in first] == ["hooks", 1]  # the first step: at once
    started = time.perf_counter()
    for _ in range(40):
        _step(timing)
    if time.perf_counter() - started < hook._FLUSH_S:  # 40 quick steps: still buffered
        assert len(_lines(tmp_path)) == 2, _lines(tmp_path)
    timing.flush()
    assert [line["step"] for line in _lines(tmp_path)[1:]] == list(range(1, 42))


def test_set_up_collectives_before_the_first_forward_are_not_the_first_step(hook: ModuleType,
                                                                            tmp_path: Path) -> None:
    timing = hook._TIMING
    timing.enter("communication")  # deepspeed.initialize broadcasting the model
    time.sleep(0.05)
    timing.leave("communication")
    time.sleep(0.05)  # the rest of the set-up
    timing.flush()
    assert _lines(tmp_path) == []  # nothing trained yet: nothing written
    _step(timing, 0.002)
    (line,) = [line for line in _lines(tmp_path) if "step" in line]
    assert line["step_ms"] < 40 and line["communication_ms"] == 0 and line["other_ms"] < 40, line
