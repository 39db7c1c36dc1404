"""The site hook's step timing in a real Python with torch (no supervisor): what it writes, that the phases add up
to the script's own step times, that it changes nothing the script computes, and that it says what it could not
attach to while the script goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.steptimes import assert_steps_agree

from traindeck.backend.launch.environ import line_buffering_dir
from traindeck.backend.steps import StepFiles

pytestmark = pytest.mark.train
pytest.importorskip("torch", reason="needs the train extra")

LOOP = """
import json, sys, time
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(96, 64), torch.randn(96, 4)),
                                   batch_size=8, num_workers=int(sys.argv[2]))
ends, losses = [], []
for x, y in data:
    time.sleep(0.05)  # "data loading"
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    ends.append(time.perf_counter())
    losses.append(loss.item())
json.dump({"ends": ends, "losses": losses}, open(sys.argv[1], "w"))
"""


def _run(tmp_path: Path, name: str, script: str, *args: str, timing: bool = True,
         extra_path: str | None = None) -> tuple[dict, Path]:  # type: ignore[type-arg]
    run_dir = tmp_path / name
    run_dir.mkdir()
    (tmp_path / "loop.py").write_text(script)
    out = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINDECK_STEPS")}
    env.update(TRAINDECK_RUN_DIR=str(run_dir), TRAINDECK_STEP_TIMING="1" if timing else "0",
               PYTHONPATH=os.pathsep.join(p for p in (str(line_buffering_dir()), extra_path) if p))
    done = subprocess.run([sys.executable, str(tmp_path / "loop.py"), str(out), *args], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # nothing of ours on the user's output
    return json.loads(out.read_text()), run_dir


def test_each_step_is_timed_and_its_phases_add_up_to_the_scripts_own_step_time(tmp_path: Path) -> None:
    own, run_dir = _run(tmp_path, "timed", LOOP, "1")  # a DataLoader worker process: forked, never writes
    steps, reports = StepFiles(run_dir).read_new()
    assert [r.rank for r in reports] == [0]
    assert {"torch optimizer step", "torch backward", "outermost module forward"} <= set(reports[0].attached)
    assert [s.step for s in steps] == list(range(1, 13)) and {s.rank for s in steps} == {0}
    # From the third step: the first step's end opens the file and settles the forward hooks, which the
    # script's own clock (read after its step) does not see but the second step's "other" does.
    pairs = [(s, (end - begin) * 1000.0) for s, begin, end in zip(steps[2:], own["ends"][1:-1], own["ends"][2:],
                                                                  strict=True)]
    assert_steps_agree([(s.step_ms, measured) for s, measured in pairs])
    for s, _measured in pairs:
        assert abs(sum(s.phases_ms.values()) - s.step_ms) <= 0.01 * s.step_ms
        assert s.phase("forward") > 0 and s.phase("backward") > 0 and s.phase("optimizer") > 0
        assert s.phase("other") >= 49.0  # the sleep is outside every phase: data loading
        assert s.host_rss and s.host_rss > 10 << 20
    assert sorted(os.listdir(run_dir / "steps")) == ["rank0.jsonl"]
    assert (run_dir / "steps" / "rank0.jsonl").stat().st_mode & 0o077 == 0


def test_timing_changes_nothing_the_script_computes_and_is_off_when_asked(tmp_path: Path) -> None:
    timed, _ = _run(tmp_path, "timed", LOOP, "0")
    plain, run_dir = _run(tmp_path, "plain", LOOP, "0", timing=False)
    assert timed["losses"] == plain["losses"]
    assert not (run_dir / "steps").exists()


def test_an_engine_the_hook_does_not_know_is_said_and_the_script_goes_on(tmp_path: Path) -> None:
    # A DeepSpeed whose engine has none of the methods the hook wraps (a version it does not know).
    fake = tmp_path / "fake"
    (fake / "deepspeed" / "runtime").mkdir(parents=True)
    (fake / "deepspeed" / "__init__.py").write_text("")
    (fake / "deepspeed" / "runtime" / "__init__.py").write_text("")
    (fake / "deepspeed" / "runtime" / "engine.py").write_text("class DeepSpeedEngine:\n    pass\n")
    own, run_dir = _run(tmp_path, "unknown", "import deepspeed.runtime.engine\n" + LOOP, "0", extra_path=str(fake))
    steps, reports = StepFiles(run_dir).read_new()
    assert len(own["losses"]) == 12 and len(steps) == 12
    missing = [m for r in reports for m in r.missing]
    assert missing == ["DeepSpeedEngine forward/backward/step (unknown DeepSpeed version)"]
