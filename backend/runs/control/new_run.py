"""One launch from a LaunchRequest, as `traindeck run` does it: a run directory, the plan for it, the supervisor.

For clients that start runs without a terminal (the dashboard): everything comes back in a LaunchOutcome, and
nothing is left half-made: a plan with errors, or a failure before the run is recorded, removes the run directory.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.environ import python_problem, resolve_python
from traindeck.backend.launch.plan import LaunchPlan, default_run_name
from traindeck.backend.launch.preview import preview_plan  # noqa: F401  (re-exported: callers import it from here)
from traindeck.backend.launch.probe import TrainingEnvironment, probe_environment
from traindeck.backend.runs.control.lifecycle import new_run_dir, start_run
from traindeck.backend.runs.record.run_store import RunRecord, RunStore

if TYPE_CHECKING:
    from traindeck.backend.estimate.prelaunch import LaunchMemoryCheck


@dataclass(frozen=True)
class LaunchOutcome:
    plan: LaunchPlan
    record: RunRecord | None  # None: nothing was started (the plan's errors say why)

    @property
    def started(self) -> bool:
        return self.record is not None


def probe_for(python: str | None) -> TrainingEnvironment | None:
    """What the training interpreter has (cached by the probe), or None when it cannot be asked: build_plan then
    reports a missing interpreter itself, and a failed probe must not stop a launch (it is advice)."""
    interpreter = resolve_python(python)
    if python_problem(interpreter):
        return None
    try:
        return probe_environment(interpreter)
    except Exception:  # noqa: BLE001
        return None


def launch_run(request: LaunchRequest, *, name: str = "", preset_name: str | None = None,
               environment: TrainingEnvironment | None = None, store: RunStore | None = None,
               memory_check: LaunchMemoryCheck | None = None, resume_arg: str | None = None,
               wrap: Callable[[LaunchPlan], LaunchPlan] | None = None) -> LaunchOutcome:
    """Build the plan for a new run directory and start the run (returns at once; the run outlives the caller).

    `name` "": the default name (`default_run_name`), numbered when a run of the store has it already.
    `environment`: the training interpreter's probe (None: probed here, from the cache when fresh). A plan with
    errors is not started and its run directory is removed. `memory_check`: the pre-launch estimate, kept in the
    run directory so the run's peaks can be set beside it afterwards. `resume_arg`: how the script resumes from a
    checkpoint (`--load {checkpoint}`), kept with the run and remembered for the script. `wrap`: turns the plan into
    another way of running it (a Slurm batch job: backend/slurm/script.py) before anything starts. Raises only when starting itself fails (the run is
    then recorded as failed, with its supervisor log kept as evidence) or the run directory cannot be written.
    """
    if environment is None or environment.python != resolve_python(request.python):
        environment = probe_for(request.python)
    run_dir = new_run_dir()
    recorded = False
    try:
        plan = build_plan(request, run_dir.path, environment=environment)
        if not plan.errors and request.hostfile is not None:  # every host checked first (backend/nodes)
            from traindeck.backend.nodes.launching import preflight_refusal

            refusal = preflight_refusal(request, plan)
            if refusal:
                plan.errors.append(refusal)
        if wrap is not None and not plan.errors:
            plan = wrap(plan)
        if plan.errors:
            return LaunchOutcome(plan, None)
        own_store = store is None
        store = store or RunStore()
        try:
            name = name or default_run_name(request.script, request.entry,
                                            request.preset.name if request.preset else None, store.run_names())
            record = start_run(plan, run_dir, name=name,
                               preset=preset_name, script=request.script, store=store)
            recorded = True
            after_start(run_dir.path, request, plan, store, preset_name=preset_name, resume_arg=resume_arg,
                        memory_check=memory_check)
        except BaseException:
            recorded = store.get_run(run_dir.run_id) is not None
            raise
        finally:
            if own_store:
                store.close()
        return LaunchOutcome(plan, record)
    finally:
        if not recorded:
            shutil.rmtree(run_dir.path, ignore_errors=True)


def after_start(run_dir: Path, request: LaunchRequest, plan: LaunchPlan, store: RunStore, *,
                preset_name: str | None, resume_arg: str | None = None,
                memory_check: LaunchMemoryCheck | None = None) -> None:
    """What every started run gets beside its supervisor, whoever started it (a launch, the queue): the memory
    check kept, request.json for `rerun` and `resume`, the sidecar (provenance, TensorBoard series), and an agent on
    every node of a multi-node run."""
    if memory_check is not None:
        _keep_estimate(run_dir, memory_check)
    _keep_request(run_dir, request, plan, preset_name, resume_arg)
    _start_sidecar(run_dir, store)
    if request.hostfile is not None or _accelerate_machines(run_dir, plan):
        # an agent on every node (backend/runs/supervisor/node_sampler.py)
        from traindeck.backend.runs.supervisor.node_sampler import start_watch

        start_watch(run_dir, store.path)


def _accelerate_machines(run_dir: Path, plan: LaunchPlan) -> bool:
    """Whether the run is accelerate's own multi-machine DeepSpeed launch through pdsh from a hostfile; its
    nodes.json is then written, so its nodes get agents as a hostfile launch's do (backend/nodes/accelerate_nodes.py)."""
    if plan.launcher != "accelerate" or "--config_file" not in plan.argv[:-1]:
        return False
    from traindeck.backend.nodes.accelerate_nodes import write_accelerate_nodes

    config = Path(plan.argv[plan.argv.index("--config_file") + 1])
    return write_accelerate_nodes(run_dir, config, plan.argv, plan.cwd, plan.python or plan.argv[0])


def _keep_estimate(run_dir: Path, check: LaunchMemoryCheck) -> None:
    from traindeck.backend.estimate.run_estimate import save_estimate

    try:
        save_estimate(run_dir, check)
    except OSError:  # advice only: the run is started and must not be reported as failed for this
        pass


def _keep_request(run_dir: Path, request: LaunchRequest, plan: LaunchPlan, preset_name: str | None,
                  resume_arg: str | None) -> None:
    """request.json, for `rerun` and `resume`; a failure to write it costs only those."""
    from traindeck.backend.launch.environ import is_secret_name
    from traindeck.backend.runs.control.resume import ResumeError, save_request

    secrets = [value for key, value in plan.env.items() if is_secret_name(key)]
    try:
        save_request(run_dir, request, preset_name=preset_name, argv_secrets=secrets, resume_arg=resume_arg)
    except (OSError, ResumeError, ValueError, TypeError):
        pass


def _start_sidecar(run_dir: Path, store: RunStore) -> None:
    """Provenance and TensorBoard series are read by a detached process of their own (see sidecar.py), so the
    launch returns at once and the supervisor loop stays as it is."""
    from traindeck.backend.runs.supervisor.sidecar import start_sidecar

    start_sidecar(run_dir, store.path)
