"""Shared fixtures. Every test runs with its own TRAINDECK_HOME so nothing touches the real user's files.

The tests come in tiers, one folder each, and each folder gives its tests a marker (`-m` selects tiers):
tests/unit/<package> (no process beyond a short subprocess), tests/gui (the dashboard, offscreen), tests/launch
(real supervised runs), tests/system (sshd, pdsh, Slurm, packaging, a fresh set-up), tests/perf (the benchmarks'
smoke forms). A GUI test that watches a real run carries `launch` itself. Helpers live in tests/support.
"""

from __future__ import annotations

import gc
import importlib.abc
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# No display on CI or these machines: Qt must render offscreen. Set before anything imports Qt.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from support import FIXTURES, REPO, TESTS  # noqa: E402, F401

# The remote-machine sshd (127.0.0.4:2224) is one session fixture for every module that uses it: a fixture imported
# into two test modules is two instances, and the second sshd could not bind the port while the first one, with
# another key, answered its tests ("authentication refused" in CI). The same for the two loopback "nodes"
# (127.0.0.2/127.0.0.3:2222): the multi-node tests and the Launch page's Check hosts test share one sshd.
from support.sshhelp import sshd  # noqa: E402, F401
from support.sshnodes import ssh_nodes  # noqa: E402, F401


def pytest_configure(config: pytest.Config) -> None:
    # Cyclic garbage is collected on the main thread only, as the dashboard does (gui.app's
    # collect_garbage_on_ui_thread): a collection started by a background read's allocation could free a closed
    # page's widgets on that thread and deadlock Qt against the GIL (a CI run hung so, for good).
    gc.disable()


@pytest.fixture(autouse=True)
def garbage_collected_on_the_main_thread() -> Iterator[None]:
    """After each test, the collection the generation thresholds call for, on the main thread (GUI tests'
    event loops also run the dashboard's one-second collector)."""
    yield
    counts, limits = gc.get_count(), gc.get_threshold()
    due = -1
    for generation in range(3):
        if counts[generation] <= limits[generation]:
            break
        due = generation
    if due >= 0:
        gc.collect(due)


@pytest.fixture(autouse=True)
def traindeck_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path_factory.mktemp("traindeck-home")
    monkeypatch.setenv("TRAINDECK_HOME", str(home))
    return home


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


HEAVY_MODULES = ("torch", "deepspeed", "accelerate", "transformers")


class _RefuseHeavyImports(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if fullname.split(".")[0] in HEAVY_MODULES:
            self.attempts.append(fullname)
            raise ImportError(f"{fullname} imported in the dashboard's process (test guard)")
        return None


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """An empty `output.log` in the test's folder, for a console or feed to follow as the test appends to it."""
    path = tmp_path / "output.log"
    path.write_bytes(b"")
    return path


@pytest.fixture
def heavy_imports(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The training libraries the code under test tried to import in this process (refused), even when an earlier
    test in the same pytest process already imported them: they are hidden from sys.modules for the test, so a
    plain `import torch` reaches the finder. Assert the list is empty."""
    guard = _RefuseHeavyImports()
    for name in [n for n in sys.modules if n.split(".")[0] in HEAVY_MODULES]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [guard, *sys.meta_path])
    return guard.attempts


# ---- real runs only in tests marked for them -------------------------------------------------------------------
# A test that starts a real supervised run costs seconds and a core; such tests carry the `launch` marker (the
# tests/launch folder gives it to its tests; tests/system's, which need servers anyway, may too) so a quick tier
# can leave them out. A supervisor leaves supervisor.log
# in its run directory: a test without the marker that left one fails here, whoever started the run. With
# TRAINDECK_TEST_RECORD_LAUNCHES=FILE the test ids are appended to FILE instead (to sort tests into tiers).
@pytest.fixture(autouse=True)
def real_runs_only_where_marked(request: pytest.FixtureRequest, traindeck_home: Path):  # type: ignore[no-untyped-def]
    from support import runhelp

    from traindeck.backend.core.paths import runs_dir

    runs = runs_dir()
    allowed = any(request.node.get_closest_marker(tier) for tier in ("launch", "system"))
    runhelp.REAL_RUNS_ALLOWED = allowed
    yield
    runhelp.REAL_RUNS_ALLOWED = False
    started = sorted(path.parent.name for path in runs.glob("*/supervisor.log"))
    if not started or allowed:
        return
    record = os.environ.get("TRAINDECK_TEST_RECORD_LAUNCHES")
    if record:
        with open(record, "a", encoding="utf-8") as out:
            out.write(request.node.nodeid + "\n")
        return
    pytest.fail(f"{request.node.nodeid} started {len(started)} real run(s) ({', '.join(started)}) without the "
                "`launch` marker: move it to tests/launch or mark it `@pytest.mark.launch`", pytrace=False)


TIERS = ("unit", "gui", "launch", "system", "perf")
# Fixtures that start one server for the whole session on fixed loopback ports (sshd, the pdsh "nodes", Slurm):
# the tests that use one are marked `machines`, and `make test-machines` runs them on one worker (CI runs it after
# `make test`). Side by side with other tests they would also do harm: stopping a run launched through DeepSpeed's
# pdsh runner makes the runner `pkill -f` every DeepSpeed launcher of the same interpreter on the "nodes", which
# are this machine.
MACHINE_FIXTURES = {"sshd", "ssh_nodes", "slurm"}
MACHINE_MARKERS = ("slurm", "multinode", "ssh")
# The long acceptance runs of whole capabilities (several real DeepSpeed or torchrun runs each, a minute or more on
# 2 cores): marked `acceptance`, run by `make test-acceptance` (and CI, after `make test`), so that `make test` stays
# near 12 minutes. Files, or "file::test" for one test of a file.
ACCEPTANCE = (
    "launch/test_trials.py", "launch/test_seed_systems.py::test_zero_infinity_swaps_to_the_nvme_path_and_records_its_disk",
    "launch/test_seed_systems.py::test_zero3_parameter_offload_to_cpu_trains_on_two_ranks",
    "launch/test_collective_ledger.py", "launch/test_step_timing.py", "launch/test_sweep_lr.py",
    "launch/test_demo_precision.py", "launch/test_public_log_replays.py", "launch/test_runs_torchrun_entries.py",
    "launch/test_runs_checkpoints_resume.py::test_deepspeed_checkpoints_and_resume_with_a_template",
    "launch/test_runs_checkpoints_resume.py::test_hf_trainer_checkpoints_are_listed_and_resume_continues_from_one",
    "launch/test_queue_entries.py::test_a_module_queued_under_deepspeed_runs_as_a_module_on_two_ranks",
    "launch/test_local_rank_arg.py",
    "launch/test_runs_checkpoints_resume.py::test_save_stop_helper_in_a_deepspeed_loop_saves_now_and_saves_then_stops",
    "unit/launch/test_extension_locks.py::test_ranks_waiting_on_a_held_build_lock_name_its_holder_in_the_stall_banner_and_stacks",
    "unit/launch/test_extension_locks.py::test_a_lock_a_build_killed_under_waiting_ranks_left_is_removed_and_said_in_the_stall_banner",
    # the dashboard driven end to end with a real DeepSpeed run: its parts (a real launch from the Launch page, a
    # real run streaming into the Runs page and stopped there, a draft error blocking Launch) each have their test
    "gui/test_dashboard_e2e.py",
    # a real C++ extension compiled under a run (the compiler takes both cores for 20 s, minutes under load)
    "gui/test_runs_op_build.py",
    # real runs of 20-50 s each beside two other workers on 2 cores (the slowest of `make test`): each is one
    # flow of a capability whose parts have quicker tests in `make test`
    "gui/test_launch_page.py::test_ctrl_enter_launches_the_cpu_demo_and_it_succeeds",
    "gui/test_launch_page.py::test_runs_of_one_preset_launched_from_the_page_one_after_another_are_numbered",
    "gui/test_launch_page.py::test_the_demo_chosen_under_cpu_demo_runs_under_an_accelerate_preset",
    "gui/test_runs_stacks_button.py::test_stall_banner_and_stacks_button_name_the_stuck_rank",
    "gui/test_runs_checkpoints_panel.py::test_checkpoints_live_save_now_stop_and_save_then_resume_and_bundle",
    "launch/test_runs_cascade_launch.py", "launch/test_step_timing_fsdp.py", "launch/test_runs_companion_stop.py",
    "launch/test_runs_launchers.py::test_cpu_demo_preset_trains_two_deepspeed_ranks_with_optimizer_offload",
    "launch/test_runs_checkpoints_resume.py::test_companion_turns_stop_into_save_then_stop",
    "launch/test_runs_checkpoints_resume.py::test_accelerate_save_state_folders_are_listed_and_resumed_with_a_template",
    "launch/test_runs_provenance_tensorboard.py",
    "launch/test_runs_launchers.py::test_deepspeed_batch_size_assertion_is_diagnosed",
    "launch/test_runs_cli.py::test_model_size_checks_memory_before_launch_and_keeps_the_estimate_for_afterwards",
    "unit/launch/test_launch_builders.py::test_launcher_module_forms_run_the_script_with_the_chosen_interpreter",
    "launch/test_seed_systems.py::test_fsdp_yaml_without_sync_is_refused_as_unsharded_which_accelerate_confirms",
    "launch/test_seed_systems.py::test_seed_fsdp_yaml_is_refused_before_launch_with_accelerates_reason",
    "launch/test_queue.py::test_a_failed_run_does_not_stop_the_next_and_a_killed_keeper_loses_nothing",
    "launch/test_queue.py::test_a_paused_queue_starts_nothing_and_stop_on_failure_pauses_it",
    "unit/cli/test_run_default_names.py", "unit/runs/test_runs_stacks.py::test_stacks_of_a_real_hung_two_rank_run_name_the_stuck_function",
    "unit/launch/test_step_timing_hook.py::test_timing_changes_nothing_the_script_computes_and_is_off_when_asked",
    "unit/presets/test_presets_atomic.py::test_sigkilled_writer_leaves_the_old_or_the_new_preset",
    "unit/estimate/test_estimate_params.py::test_counts_equal_the_real_models",
    "perf/test_bench_smoke.py::test_bench_smoke[bench_run_output]",
    "perf/test_bench_smoke.py::test_bench_smoke[bench_step_timing]",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.path)).relative_to(TESTS).parts
        if len(parts) > 1 and parts[0] in TIERS:
            item.add_marker(parts[0])
        where = "/".join(parts)
        if any(where == name or item.nodeid.split("[")[0].endswith(name) or item.nodeid.endswith(name)
               for name in ACCEPTANCE):
            item.add_marker(pytest.mark.acceptance)
        if MACHINE_FIXTURES & set(getattr(item, "fixturenames", ())) \
                or any(item.get_closest_marker(name) for name in MACHINE_MARKERS):
            item.add_marker(pytest.mark.machines)
