"""Helpers for the run-engine tests: start a run from a hand-made LaunchPlan, wait for it, count what is left."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from support import FIXTURES, REPO
from traindeck.backend.launch.environ import torch_extensions_dir
from traindeck.backend.launch.plan import LaunchPlan
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run
from traindeck.backend.runs.record.run_store import RunRecord, RunStore
from traindeck.backend.runs.supervisor.liveness import run_processes
from traindeck.backend.steps import StepRecord

SCRIPTS = FIXTURES / "scripts"
BEHAVE = SCRIPTS / "behave.py"
DEMO = REPO / "resources" / "demo" / "train_tiny.py"

# Set by the conftest for each test: True only for tests marked `launch` (tests/launch, and GUI tests that watch a
# real run), so a quick tier never starts a real run by accident.
REAL_RUNS_ALLOWED = False


def _refuse_unless_marked() -> None:
    if not REAL_RUNS_ALLOWED:
        raise RuntimeError("this test starts a real supervised run: move it to tests/launch or mark it "
                           "@pytest.mark.launch")


def job_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("TRAINDECK_RUN_ID", None)
    env["PYTHONUNBUFFERED"] = "1"
    # The folder `make setup` built DeepSpeed's ops into, so no test waits minutes on a first-use build.
    env.setdefault("TORCH_EXTENSIONS_DIR", str(torch_extensions_dir(sys.executable)))
    env.update(extra)
    return env


def start(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, launcher: str = "python",
          files: dict[str, str] | None = None, name: str = "test", stall_min_s: float = 120.0) -> RunRecord:
    run_dir = new_run_dir()
    plan = LaunchPlan(launcher=launcher, argv=argv, env=env or job_env(), cwd=str(cwd or run_dir.path),  # type: ignore[arg-type]
                      files=files or {})
    _refuse_unless_marked()
    return start_run(plan, run_dir, name=name, stall_min_s=stall_min_s)


def python_job(*args: str, **kwargs: object) -> RunRecord:
    return start([sys.executable, str(BEHAVE), *args], **kwargs)  # type: ignore[arg-type]


def wait_until(predicate, timeout: float = 60.0, interval: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s")


def wait_finished(run_id: str, timeout: float = 120.0) -> RunRecord:
    store = RunStore()
    try:
        def done() -> RunRecord | None:
            record = store.get_run(run_id)
            assert record is not None
            return record if record.finished else None

        return wait_until(done, timeout)
    finally:
        store.close()


def succeeded_clean(run: RunRecord, timeout: float = 300) -> RunRecord:
    """The run once finished: it succeeded (else its diagnosis and log's end) and nothing of it is left."""
    done = wait_finished(run.id, timeout)
    log = Path(done.run_dir, "output.log").read_text(errors="replace")
    assert done.state == "succeeded", (done.diagnosis, log[-3000:])
    assert leftovers(done) == []
    return done


def steps_by_rank(run: RunRecord) -> dict[int, dict[int, StepRecord]]:
    """The run's timed steps from the store: rank -> step -> its record."""
    with RunStore() as store:
        records = store.steps(run.id)
    out: dict[int, dict[int, StepRecord]] = {}
    for record in records:
        out.setdefault(record.rank, {})[record.step] = record
    return out


def traindeck_cli(*args: str) -> str:
    """`traindeck ARGS`' output; a failing command fails the test."""
    return subprocess.run([sys.executable, "-m", "traindeck", *args], capture_output=True, text=True,
                          check=True).stdout


def get(run_id: str) -> RunRecord:
    with RunStore() as store:
        record = store.get_run(run_id)
    assert record is not None
    return record


def leftovers(record: RunRecord) -> list[int]:
    """Pids of the run still alive: by marker, recorded pids, the supervisor itself (after a short settle)."""
    def alive() -> list[int]:
        pids = [p.pid for p in run_processes(record.id, get(record.id))]
        for pid in (record.supervisor_pid,):
            if pid and psutil.pid_exists(pid):
                try:
                    if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                        pids.append(pid)
                except psutil.Error:
                    pass
        return pids

    deadline = time.monotonic() + 10.0
    pids = alive()
    while pids and time.monotonic() < deadline:
        time.sleep(0.2)
        pids = alive()
    return pids


def events(run_id: str) -> list[tuple[str, str]]:
    with RunStore() as store:
        return [(e.kind, e.text) for e in store.events(run_id)]


def metrics(run_id: str) -> dict[str, float]:
    with RunStore() as store:
        return store.last_metrics(run_id)


def launch(script: Path, *args: str, launcher: str, nproc: int | None = None, config: Path | None = None,
           name: str = "test", env: dict[str, str] | None = None, preset: str | None = None,
           stall_min_s: float = 120.0) -> RunRecord:
    """Start a run the way `traindeck run` does: LaunchRequest -> build_plan -> start_run."""
    from traindeck.backend.launch.builders import LaunchRequest, build_plan
    from traindeck.backend.presets import load_preset

    run_dir = new_run_dir()
    request = LaunchRequest(script=str(script), script_args=list(args), launcher=launcher, nproc=nproc,  # type: ignore[arg-type]
                            config_file=config, cwd=run_dir.path, env=env or {},
                            preset=load_preset(preset) if preset else None)
    plan = build_plan(request, run_dir.path)
    assert plan.ok, plan.errors
    _refuse_unless_marked()
    return start_run(plan, run_dir, name=name, stall_min_s=stall_min_s)


def ranks(record: RunRecord) -> dict[int, dict]:  # type: ignore[type-arg]
    return {p["rank"]: p for p in record.processes if p["role"] == "rank"}
