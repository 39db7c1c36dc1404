"""The torchrun launcher and the module and command forms: exact argv per launcher, the checks before launch, the
preview, the saved request a rerun reads back, the `run` command line, and a preset naming torchrun. Nothing is
started here."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from traindeck.backend.cli import run_cmd
from traindeck.backend.launch.builders import LaunchRequest, build_plan
from traindeck.backend.launch.preview import FREE_PORT, preview_launch
from traindeck.backend.presets import Preset, preset_from_mapping
from traindeck.backend.runs.control.resume import load_request, request_from, save_request

PY = sys.executable
PORT = 29512
TORCHRUN = [PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(PORT)]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "mytool"
    tool.write_text(f"#!{PY}\nprint('tool')\n")
    tool.chmod(0o755)
    return tmp_path


def plan_for(workdir: Path, **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("script", "train.py")
    kw.setdefault("python", PY)
    kw.setdefault("cwd", workdir)
    base = {"PATH": f"{workdir / 'bin'}{os.pathsep}/usr/bin:/bin", "HOME": "/home/u"}
    return build_plan(LaunchRequest(**kw), workdir / "runs" / "r1", base_env=base, helpers=Path("/opt/td/ph"),
                      is_port_busy=lambda port: False, free_port=lambda: PORT)


def test_torchrun_launcher_runs_a_script_on_a_fixed_rendezvous_port(workdir: Path) -> None:
    plan = plan_for(workdir, launcher="torchrun", nproc=2, script_args=["--lr", "1"])
    assert plan.errors == [] and plan.warnings == []
    assert plan.argv == [*TORCHRUN, "train.py", "--lr", "1"]
    assert (plan.launcher, plan.nproc, plan.master_port, plan.entry) == ("torchrun", 2, PORT, "script")


def test_torchrun_takes_the_presets_process_count_and_pins_chosen_gpus(workdir: Path) -> None:
    preset = Preset(name="t", launcher="torchrun", num_processes=3)
    plan = plan_for(workdir, preset=preset)
    assert plan.launcher == "torchrun" and plan.nproc == 3 and "3" in plan.argv
    pinned = plan_for(workdir, launcher="torchrun", gpus=(1, 3))
    assert pinned.nproc == 2 and pinned.env["CUDA_VISIBLE_DEVICES"] == "1,3"


@pytest.mark.parametrize(("launcher", "nproc", "head", "flag"), [
    ("python", 1, [PY, "-m"], None),
    ("python", 2, TORCHRUN, "--module"),
    ("torchrun", 2, TORCHRUN, "--module"),
    ("deepspeed", 2, [PY, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(PORT)],
     "--module"),
])
def test_a_module_is_told_with_each_launchers_own_flag(workdir: Path, launcher: str, nproc: int, head: list[str],
                                                       flag: str | None) -> None:
    plan = plan_for(workdir, launcher=launcher, nproc=nproc, entry="module", script="pkg.train", script_args=["-x"])
    assert plan.errors == [] and plan.entry == "module"
    assert plan.argv == [*head, *([flag] if flag else []), "pkg.train", "-x"]


def test_accelerate_runs_a_module_and_a_command(workdir: Path) -> None:
    module = plan_for(workdir, launcher="accelerate", entry="module", script="pkg.train")
    assert module.errors == [] and module.argv[-4:] == ["--main_process_port", str(PORT), "--module", "pkg.train"]
    command = plan_for(workdir, launcher="accelerate", entry="command", script="mytool")
    assert command.argv[-2:] == ["--no_python", str(workdir / "bin" / "mytool")]


@pytest.mark.parametrize(("launcher", "nproc", "flag"), [
    ("torchrun", 2, "--no-python"), ("python", 2, "--no-python"), ("deepspeed", 2, "--no_python")])
def test_a_command_under_a_launcher_is_found_on_the_runs_path(workdir: Path, launcher: str, nproc: int,
                                                              flag: str) -> None:
    plan = plan_for(workdir, launcher=launcher, nproc=nproc, entry="command", script="mytool", script_args=["a"])
    assert plan.errors == []
    assert plan.argv[-3:] == [flag, str(workdir / "bin" / "mytool"), "a"]


def test_a_command_alone_is_run_as_it_is_and_needs_no_port(workdir: Path) -> None:
    plan = plan_for(workdir, entry="command", script="mytool", script_args=["train", "--x"])
    assert plan.errors == [] and plan.master_port is None
    assert plan.argv == [str(workdir / "bin" / "mytool"), "train", "--x"]  # which one ran: the recorded command
    relative = plan_for(workdir, entry="command", script="bin/mytool")
    assert relative.errors == [] and relative.argv == ["bin/mytool"]


def test_what_cannot_be_started_is_said_before_launch(workdir: Path) -> None:
    assert plan_for(workdir, entry="command", script="no-such-tool").errors == [
        "command not found on the run's PATH: no-such-tool"]
    (workdir / "data.txt").write_text("")
    assert plan_for(workdir, entry="command", script="./data.txt").errors == [
        f"command not found or not executable: ./data.txt (in {workdir})"]
    assert plan_for(workdir, entry="module", script="pkg/train.py").errors == [
        "not a module name: 'pkg/train.py' (a dotted name such as pkg.train)"]
    # `traindeck run -- mytool x` and `traindeck run pkg.train`: the script form, with the way out named.
    assert plan_for(workdir, script="mytool").errors == [
        f"script not found: mytool (in {workdir}); to run the command mytool, give it as a command "
        "(traindeck run --command -- mytool ...)"]
    assert plan_for(workdir, script="pkg.train").errors == [
        f"script not found: pkg.train (in {workdir}); to run the module pkg.train, give it as a module "
        "(traindeck run -m pkg.train ...)"]


def test_preview_of_torchrun_and_of_a_module_without_a_name(traindeck_home: Path, workdir: Path) -> None:
    preset = Preset(name="t", launcher="torchrun", num_processes=2)
    shown = preview_launch(preset, cwd=str(workdir), python=PY)
    assert shown.errors == [] and shown.argv[:7] == [*TORCHRUN[:6], FREE_PORT]
    module = preview_launch(preset, cwd=str(workdir), python=PY, entry="module")
    assert module.errors == [] and module.argv[-2:] == ["--module", "train"]
    command = preview_launch(preset, cwd=str(workdir), python=PY, entry="command")
    assert command.errors == [] and command.argv[-2:] == ["--no-python", "train"]


def test_a_rerun_reads_back_a_module_or_a_command(workdir: Path) -> None:
    for entry, name in (("module", "pkg.train"), ("command", "mytool")):
        request = LaunchRequest(script=name, script_args=["--x"], entry=entry, launcher="torchrun", nproc=2,  # type: ignore[arg-type]
                                cwd=workdir)
        save_request(workdir, request, preset_name=None)
        again = request_from(load_request(workdir))
        assert (again.script, again.entry, again.launcher, again.nproc) == (name, entry, "torchrun", 2)
    data = load_request(workdir)
    del data["entry"]  # a request kept without one names a script
    assert request_from(data).entry == "script"


def test_run_command_line_takes_a_module_or_a_command() -> None:
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    module = parser.parse_args(["run", "--launcher", "torchrun", "--nproc", "2", "-m", "pkg.train", "-m", "--x"])
    assert (module.entry, module.command, module.launcher) == ("module", ["pkg.train", "-m", "--x"], "torchrun")
    command = parser.parse_args(["run", "--command", "--", "llamafactory-cli", "train", "--command"])
    assert (command.entry, command.command) == ("command", ["--", "llamafactory-cli", "train", "--command"])
    assert parser.parse_args(["run", "train.py", "-m"]).entry == "script"
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "-m", "--command", "x"])
    assert [run_cmd.default_name(t, e) for t, e in (("a/train.py", "script"), ("pkg.sub.train", "module"),
                                                     ("/venv/bin/llamafactory-cli", "command"))] == [
        "train", "train", "llamafactory-cli"]
    # With a preset, its name follows, so runs of one script on different set-ups differ at a glance.
    assert [run_cmd.default_name(t, e, "cpu-demo") for t, e in (("a/train.py", "script"), ("pkg.train", "module"),
                                                                 ("llamafactory-cli", "command"))] == [
        "train-cpu-demo", "train-cpu-demo", "llamafactory-cli-cpu-demo"]


def test_a_preset_may_name_torchrun() -> None:
    preset = preset_from_mapping({"name": "t", "launcher": "torchrun", "num_processes": 4})
    assert preset.launcher == "torchrun" and preset.process_count() == 4


def test_a_command_under_deepspeed_is_warned_of_the_local_rank_argument(workdir: Path) -> None:
    plan = plan_for(workdir, launcher="deepspeed", nproc=1, entry="command", script="mytool", script_args=["a"])
    assert plan.errors == [] and plan.argv[-3:] == ["--no_python", str(workdir / "bin" / "mytool"), "a"]
    assert plan.warnings == [
        "the deepspeed launcher runs a command as `COMMAND --local_rank=N ARGS`: it puts --local_rank=N before the "
        "command's own arguments, so a command that does not take --local_rank stops at once; the torchrun "
        "launcher passes the rank in LOCAL_RANK only"]
    assert "--no_local_rank" not in plan.argv  # what runs is what DeepSpeed runs; nobody asked for less
    # A script or a module gets it too, after its name, where its parser reads it: nothing to warn of.
    for entry, name in (("script", "train.py"), ("module", "pkg.train")):
        assert not any("--local_rank" in w for w in plan_for(workdir, launcher="deepspeed", nproc=1, entry=entry,
                                                              script=name).warnings)
    # The other launchers pass the rank in LOCAL_RANK only.
    assert not any("--local_rank" in w for w in plan_for(workdir, launcher="torchrun", nproc=2, entry="command",
                                                          script="mytool").warnings)


def test_python_as_a_command_is_the_training_interpreter(workdir: Path) -> None:
    other = workdir / "bin" / "python"  # what PATH finds first (a pyenv shim, the system's)
    other.write_text("#!/bin/sh\nexit 0\n")
    other.chmod(0o755)
    plan = plan_for(workdir, entry="command", script="python", script_args=["-c", "print(1)"])
    assert plan.errors == [] and plan.argv == [PY, "-c", "print(1)"]
    assert plan.warnings == [f"the command's python is the training interpreter {PY}, not {other} (the first python "
                             "on the run's PATH); give a path to run another Python"]
    plan = plan_for(workdir, launcher="deepspeed", nproc=1, entry="command", script="python3", script_args=["x.py"])
    assert plan.argv[-3:] == ["--no_python", PY, "x.py"]
    assert plan.warnings[0].startswith(f"the command's python3 is the training interpreter {PY}")
    assert 'Python itself refuses it ("unknown option --local_rank=0"): choose Script or Module' in plan.warnings[1]
    # A path, or another name, is the command the user named.
    assert plan_for(workdir, entry="command", script="bin/python").argv == ["bin/python"]
