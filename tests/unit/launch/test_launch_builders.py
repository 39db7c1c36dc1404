"""Launch builders: exact argv, config files parsed back, arguments verbatim, environment. Nothing is started
here except in the one smoke test at the end, which runs a plan for plain python."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from traindeck.backend.launch.builders import (
    ACCELERATE_CONFIG,
    DS_CONFIG,
    LaunchRequest,
    build_plan,
    render_config_files,
)
from traindeck.backend.launch.environ import line_buffering_dir, masked_env, torch_extensions_dir
from traindeck.backend.launch.probe import TrainingEnvironment
from traindeck.backend.presets import Preset

PY = sys.executable
PORT = 29511
HOSTILE = [
    "a; rm -rf /",
    "$(touch /tmp/traindeck-pwned)",
    "`id`",
    "'single' \"double\"",
    "line one\nline two",
    "--flag=x && echo y | cat > z",
    "{not_ds}",
    "",
    "  spaced  ",
    "--",
    "ünïcode ✓",
]

ZERO2 = {
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 1,
}
ACCELERATE_DS = {
    "compute_environment": "LOCAL_MACHINE",
    "distributed_type": "DEEPSPEED",
    "num_processes": 2,
    "mixed_precision": "bf16",
    "deepspeed_config": {
        "zero_stage": 2,
        "offload_optimizer_device": "cpu",
        "gradient_accumulation_steps": 4,
        "gradient_clipping": 1.0,
        "zero3_init_flag": False,
    },
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("print('hi')\n")
    return tmp_path


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "runs" / "r1"


def no_port_wanted() -> int:
    raise AssertionError("this plan needs no rendezvous port")


def plan_for(workdir: Path, run_dir: Path, **kw):
    kw.setdefault("script", "train.py")
    kw.setdefault("python", PY)
    kw.setdefault("cwd", workdir)
    builder_kw = {k: kw.pop(k) for k in ("environment", "base_env", "is_port_busy", "free_port") if k in kw}
    builder_kw.setdefault("base_env", {"PATH": "/usr/bin:/bin", "HOME": "/home/u"})
    builder_kw.setdefault("is_port_busy", lambda port: False)
    builder_kw.setdefault("free_port", lambda: PORT)
    return build_plan(LaunchRequest(**kw), run_dir, helpers=Path("/opt/td/pyhelpers"), **builder_kw)


# ---- accelerate -------------------------------------------------------------------------------------------------

def test_accelerate_argv_and_files(workdir, run_dir):
    preset = Preset(name="z2", launcher="accelerate", accelerate=ACCELERATE_DS, deepspeed=ZERO2)
    plan = plan_for(workdir, run_dir, preset=preset, script_args=["--deepspeed", "{ds_config}", "--lr", "1e-4"])
    ds_path = str(run_dir / DS_CONFIG)
    assert plan.errors == []
    assert plan.argv == [PY, "-m", "accelerate.commands.launch", "--config_file", str(run_dir / ACCELERATE_CONFIG),
                         "--main_process_port", str(PORT), "train.py", "--deepspeed", ds_path, "--lr", "1e-4"]
    assert (plan.launcher, plan.nproc, plan.master_port, plan.python) == ("accelerate", 2, PORT, PY)
    assert plan.ds_config_path == ds_path and plan.run_dir == str(run_dir) and plan.cwd == str(workdir)

    accelerate = yaml.safe_load(plan.files[ACCELERATE_CONFIG])
    # accelerate refuses inline ZeRO/batch/precision keys beside a deepspeed_config_file: none are left.
    assert accelerate["deepspeed_config"] == {"zero3_init_flag": False, "deepspeed_config_file": ds_path}
    assert "mixed_precision" not in accelerate
    assert accelerate["distributed_type"] == "DEEPSPEED" and accelerate["num_processes"] == 2
    deepspeed = json.loads(plan.files[DS_CONFIG])
    assert deepspeed["zero_optimization"] == ZERO2["zero_optimization"]
    assert deepspeed["bf16"] == {"enabled": True}  # the preset's precision moved where DeepSpeed reads it
    assert ACCELERATE_DS["deepspeed_config"]["zero_stage"] == 2, "rendering must not change the preset"


def test_render_keeps_deepspeed_precision_of_its_own():
    preset = Preset(name="p", launcher="accelerate", accelerate={**ACCELERATE_DS, "mixed_precision": "fp16"},
                    deepspeed={**ZERO2, "bf16": {"enabled": "auto"}})
    files = render_config_files(preset, Path("/runs/x"))
    assert json.loads(files[DS_CONFIG])["bf16"] == {"enabled": "auto"}
    assert "fp16" not in json.loads(files[DS_CONFIG])
    assert yaml.safe_load(files[ACCELERATE_CONFIG])["deepspeed_config"]["deepspeed_config_file"] == "/runs/x/ds_config.json"


def test_render_accelerate_only_preset_is_kept_as_it_is():
    ddp = {"compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_GPU", "num_processes": 4,
           "mixed_precision": "bf16", "gpu_ids": "all"}
    files = render_config_files(Preset(name="ddp", launcher="accelerate", accelerate=ddp), Path("/r"))
    assert list(files) == [ACCELERATE_CONFIG]
    assert yaml.safe_load(files[ACCELERATE_CONFIG]) == ddp


def test_accelerate_nproc_override_and_fixed_port(workdir, run_dir):
    preset = Preset(name="ddp", launcher="accelerate",
                    accelerate={"distributed_type": "MULTI_GPU", "num_processes": 2, "main_process_port": 29600})
    plan = plan_for(workdir, run_dir, preset=preset, nproc=4, free_port=no_port_wanted)
    assert plan.argv[5:] == ["--main_process_port", "29600", "--num_processes", "4", "train.py"]
    assert (plan.nproc, plan.master_port) == (4, 29600)


def test_accelerate_launcher_for_a_deepspeed_only_config_gets_a_minimal_yaml(workdir, run_dir):
    preset = Preset(name="ds", launcher="deepspeed", deepspeed=ZERO2)
    plan = plan_for(workdir, run_dir, preset=preset, launcher="accelerate")
    accelerate = yaml.safe_load(plan.files[ACCELERATE_CONFIG])
    assert accelerate["distributed_type"] == "DEEPSPEED"
    assert accelerate["deepspeed_config"] == {"deepspeed_config_file": str(run_dir / DS_CONFIG)}
    assert accelerate["num_processes"] == 1
    assert any("minimal" in w for w in plan.warnings)


def test_accelerate_without_config_on_a_cpu_only_environment(workdir, run_dir):
    cpu = TrainingEnvironment(python=PY, python_version="3.11.7", torch="2.13.0+cpu", cuda_available=False,
                              device_count=0, accelerate="1.15.0", deepspeed=None)
    plan = plan_for(workdir, run_dir, launcher="accelerate", nproc=2, environment=cpu)
    accelerate = yaml.safe_load(plan.files[ACCELERATE_CONFIG])
    # MULTI_CPU would start one process (accelerate starts several on the CPU only through mpirun): torchrun starts
    # both, and ACCELERATE_USE_CPU keeps each rank on the CPU.
    assert (accelerate["distributed_type"], accelerate["use_cpu"], accelerate["num_processes"]) == ("MULTI_GPU", False, 2)
    assert plan.env["ACCELERATE_USE_CPU"] == "true"
    one = plan_for(workdir, run_dir, launcher="accelerate", nproc=1, environment=cpu)
    assert yaml.safe_load(one.files[ACCELERATE_CONFIG])["use_cpu"] is True and "ACCELERATE_USE_CPU" not in one.env
    assert plan.errors == []
    assert any("CUDA is not available" in w for w in plan.warnings)


# ---- deepspeed --------------------------------------------------------------------------------------------------

def test_deepspeed_argv(workdir, run_dir):
    preset = Preset(name="z2", launcher="deepspeed", deepspeed=ZERO2)
    plan = plan_for(workdir, run_dir, preset=preset, nproc=2, script_args=["--deepspeed_config", "{ds_config}"])
    assert plan.errors == [] and plan.warnings == []
    assert plan.argv == [PY, "-m", "deepspeed.launcher.runner", "--num_gpus", "2", "--master_port", str(PORT),
                         "train.py", "--deepspeed_config", str(run_dir / DS_CONFIG)]
    assert json.loads(plan.files[DS_CONFIG]) == ZERO2
    assert list(plan.files) == [DS_CONFIG]


def test_deepspeed_include_num_nodes_hostfile(workdir, run_dir):
    hostfile = workdir / "hostfile"
    hostfile.write_text("node1 slots=8\nnode2 slots=8\n")
    plan = plan_for(workdir, run_dir, launcher="deepspeed", include="localhost:0,2", master_port=29700)
    assert plan.argv[3:8] == ["--include", "localhost:0,2", "--master_port", "29700", "train.py"]
    assert plan.nproc == 2

    plan = plan_for(workdir, run_dir, launcher="deepspeed", nproc=8, num_nodes=2, hostfile=hostfile)
    # The first host is always the rendezvous address: never DeepSpeed's `ssh FIRST hostname -I` guess.
    assert plan.argv[3:] == ["--num_gpus", "8", "--master_port", str(PORT), "--num_nodes", "2",
                             "--hostfile", str(hostfile), "--master_addr", "node1", "--no_ssh_check", "train.py"]

    plan = plan_for(workdir, run_dir, launcher="deepspeed", include="localhost:0", num_nodes=1)
    assert any("--num_nodes together with --include" in e for e in plan.errors)

    plan = plan_for(workdir, run_dir, launcher="deepspeed", hostfile=workdir / "nope")
    assert any("cannot read the hostfile" in e for e in plan.errors)


def test_deepspeed_keeps_cuda_visible_devices(workdir, run_dir):
    # The deepspeed runner drops CUDA_VISIBLE_DEVICES when --num_gpus is given; --include keeps the choice.
    plan = plan_for(workdir, run_dir, launcher="deepspeed", nproc=2, env={"CUDA_VISIBLE_DEVICES": "2,3,5"})
    assert plan.argv[3:5] == ["--include", "localhost:2,3"]
    plan = plan_for(workdir, run_dir, launcher="deepspeed", nproc=4, env={"CUDA_VISIBLE_DEVICES": "1"})
    assert any("CUDA_VISIBLE_DEVICES=1 shows 1 GPU" in e for e in plan.errors)


def test_deepspeed_warns_when_the_script_is_not_given_the_config(workdir, run_dir):
    plan = plan_for(workdir, run_dir, preset=Preset(name="z", launcher="deepspeed", deepspeed=ZERO2))
    assert any("--deepspeed_config {ds_config}" in w for w in plan.warnings)
    plan = plan_for(workdir, run_dir, preset=Preset(name="z", launcher="deepspeed", deepspeed=ZERO2),
                    script_args=["--deepspeed=/elsewhere/ds.json"])
    assert plan.warnings == []


# ---- python -----------------------------------------------------------------------------------------------------

def test_python_argv_single_process_needs_no_port(workdir, run_dir):
    plan = plan_for(workdir, run_dir, script_args=["--steps", "3"], free_port=no_port_wanted)
    assert plan.argv == [PY, "train.py", "--steps", "3"]
    assert (plan.launcher, plan.nproc, plan.master_port, plan.files) == ("python", 1, None, {})


def test_python_with_several_processes_goes_through_torchrun(workdir, run_dir):
    plan = plan_for(workdir, run_dir, nproc=3, script_args=["x"])
    assert plan.argv == [PY, "-m", "torch.distributed.run", "--nproc_per_node", "3", "--master_port", str(PORT),
                         "train.py", "x"]
    assert any("torch.distributed.run" in w for w in plan.warnings)


# ---- arguments, ports, inputs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("launcher", ["accelerate", "deepspeed", "python"])
def test_hostile_arguments_stay_verbatim(workdir, run_dir, launcher):
    preset = Preset(name="z", launcher=launcher, accelerate={"distributed_type": "DEEPSPEED"}, deepspeed=ZERO2)
    plan = plan_for(workdir, run_dir, preset=preset, script_args=[*HOSTILE, "--deepspeed_config={ds_config}"])
    assert plan.argv[-len(HOSTILE) - 1:] == [*HOSTILE, f"--deepspeed_config={run_dir / DS_CONFIG}"]


def test_ds_config_placeholder_without_a_deepspeed_config_is_an_error(workdir, run_dir):
    plan = plan_for(workdir, run_dir, script_args=["--deepspeed", "{ds_config}"])
    assert any("{ds_config}" in e for e in plan.errors)
    assert plan.argv[-1] == "{ds_config}"


def test_busy_fixed_port_is_an_error_before_launch(workdir, run_dir):
    plan = plan_for(workdir, run_dir, launcher="deepspeed", master_port=29500, is_port_busy=lambda p: p == 29500)
    assert any("port 29500 is already in use" in e for e in plan.errors)
    assert not plan.ok
    plan = plan_for(workdir, run_dir, launcher="deepspeed", master_port=70000)
    assert any("70000 is not a valid port" in e for e in plan.errors)


def test_missing_script_preset_and_config_together_bad_nproc(workdir, run_dir):
    plan = plan_for(workdir, run_dir, script="missing.py")
    assert any("script not found: missing.py" in e for e in plan.errors)
    plan = plan_for(workdir, run_dir, preset=Preset(name="p", launcher="python"), config_file=workdir / "x.json")
    assert any("not both" in e for e in plan.errors)
    plan = plan_for(workdir, run_dir, nproc=0)
    assert any("at least 1" in e for e in plan.errors)


def test_missing_packages_in_the_training_environment_are_errors(workdir, run_dir):
    bare = TrainingEnvironment(python="/opt/py/bin/python3", python_version="3.11.7", torch=None,
                               torch_error="ModuleNotFoundError: No module named 'torch'")
    plan = plan_for(workdir, run_dir, preset=Preset(name="z", launcher="accelerate", deepspeed=ZERO2), environment=bare)
    assert "torch is not installed for /opt/py/bin/python3 (pip install torch)" in plan.errors
    assert "accelerate is not installed for /opt/py/bin/python3 (pip install accelerate)" in plan.errors
    assert "deepspeed is not installed for /opt/py/bin/python3 (pip install deepspeed)" in plan.errors


# ---- config files given directly ----------------------------------------------------------------------------------

def test_accelerate_yaml_given_directly_is_snapshotted_with_its_deepspeed_json(workdir, run_dir):
    (workdir / "cfg").mkdir()
    (workdir / "cfg" / "ds.json").write_text(json.dumps(ZERO2))
    yaml_text = ("# my config\ncompute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\nnum_processes: 3\n"
                 "deepspeed_config:\n  deepspeed_config_file: ds.json\n  zero3_init_flag: false\n")
    (workdir / "cfg" / "acc.yaml").write_text(yaml_text)
    plan = plan_for(workdir, run_dir, config_file=Path("cfg/acc.yaml"), script_args=["--deepspeed", "{ds_config}"])
    assert plan.errors == []
    assert (plan.launcher, plan.nproc) == ("accelerate", 3)
    assert json.loads(plan.files[DS_CONFIG]) == ZERO2
    accelerate = yaml.safe_load(plan.files[ACCELERATE_CONFIG])
    assert accelerate["deepspeed_config"] == {"deepspeed_config_file": str(run_dir / DS_CONFIG), "zero3_init_flag": False}
    assert plan.argv[-1] == str(run_dir / DS_CONFIG)


def test_accelerate_yaml_without_deepspeed_is_copied_verbatim(workdir, run_dir):
    text = "# comments survive\ndistributed_type: MULTI_GPU\nnum_processes: 2\n"
    (workdir / "acc.yml").write_text(text)
    plan = plan_for(workdir, run_dir, config_file=workdir / "acc.yml")
    assert plan.files == {ACCELERATE_CONFIG: text}
    assert plan.launcher == "accelerate"


def test_deepspeed_json_given_directly(workdir, run_dir):
    text = json.dumps(ZERO2, indent=4)
    (workdir / "ds.json").write_text(text)
    plan = plan_for(workdir, run_dir, config_file=workdir / "ds.json", script_args=["--deepspeed_config", "{ds_config}"])
    assert plan.launcher == "deepspeed"
    assert plan.files == {DS_CONFIG: text}
    assert plan.argv[3:5] == ["--num_gpus", "1"]


def test_broken_config_file_and_missing_referenced_deepspeed_file(workdir, run_dir):
    (workdir / "bad.json").write_text('{"train_batch_size": 8,,}')
    plan = plan_for(workdir, run_dir, config_file=workdir / "bad.json")
    assert plan.errors and plan.errors[0].startswith(f"{workdir / 'bad.json'}:1:")
    (workdir / "acc.yaml").write_text("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: gone.json\n")
    plan = plan_for(workdir, run_dir, config_file=workdir / "acc.yaml")
    assert any("gone.json cannot be read" in e for e in plan.errors)
    plan = plan_for(workdir, run_dir, config_file=workdir / "absent.yaml")
    assert any("cannot read the file" in e for e in plan.errors)


# ---- environment --------------------------------------------------------------------------------------------------

def test_environment_inherited_overridden_unbuffered_helpers(workdir, run_dir):
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/mine", "HF_TOKEN": "hf_secret_value", "KEEP": "1",
            "HOME": "/home/u"}
    plan = plan_for(workdir, run_dir, base_env=base, env={"WANDB_API_KEY": "wandb-secret", "KEEP": "2"})
    env = plan.env
    assert env["PYTHONUNBUFFERED"] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join([str(line_buffering_dir()), "/opt/td/pyhelpers", "/mine"])
    assert env["TORCH_EXTENSIONS_DIR"] == str(torch_extensions_dir(plan.python))  # the interpreter's own folder
    assert (env["KEEP"], env["HF_TOKEN"], env["WANDB_API_KEY"]) == ("2", "hf_secret_value", "wandb-secret")
    shown = masked_env(env)
    assert shown["HF_TOKEN"] == shown["WANDB_API_KEY"] == "***"
    assert "hf_secret_value" not in json.dumps(shown) and "wandb-secret" not in json.dumps(shown)
    assert shown["KEEP"] == "2" and shown["PATH"] == "/usr/bin"

    plan = plan_for(workdir, run_dir, base_env={"TORCH_EXTENSIONS_DIR": "/fast/ext"})
    assert plan.env["TORCH_EXTENSIONS_DIR"] == "/fast/ext"
    assert plan.env["PYTHONPATH"] == os.pathsep.join([str(line_buffering_dir()), "/opt/td/pyhelpers"])


def test_plan_command_line_quotes_for_a_shell(workdir, run_dir):
    plan = plan_for(workdir, run_dir, script_args=["a b", "$(x)"])
    assert plan.command_line() == f"{PY} train.py 'a b' '$(x)'"


# ---- smoke: a real process --------------------------------------------------------------------------------------

ECHO_SCRIPT = """\
import json, os, sys, time
print(json.dumps({"argv": sys.argv[1:], "executable": sys.executable, "cwd": os.getcwd(),
                  "unbuffered": os.environ.get("PYTHONUNBUFFERED"), "token": os.environ.get("HF_TOKEN"),
                  "path": sys.path[1:3]}))
time.sleep(3)  # no flush: the line must still arrive now, not when the process exits
"""


def test_python_plan_runs_with_args_and_env_intact(workdir, run_dir):
    (workdir / "echo.py").write_text(ECHO_SCRIPT)
    helpers = workdir / "helpers"
    plan = build_plan(LaunchRequest(script="echo.py", script_args=HOSTILE, python=PY, cwd=workdir,
                                    env={"HF_TOKEN": "hf_live_token"}), run_dir, helpers=helpers)
    assert plan.errors == []
    started = time.monotonic()
    proc = subprocess.Popen(plan.argv, env=plan.env, cwd=plan.cwd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        arrived = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    seen = json.loads(line)
    assert seen["argv"] == HOSTILE
    assert Path(seen["executable"]) == Path(PY) and Path(seen["cwd"]) == workdir
    assert seen["unbuffered"] == "1" and seen["token"] == "hf_live_token"
    # PYTHONPATH entries come right after the script's folder: the line-buffering hook, then the helpers.
    assert seen["path"] == [str(line_buffering_dir()), str(helpers)]
    assert arrived < 2.5, f"the first line took {arrived:.1f} s: output is buffered"


RANK_ECHO = """\
import json, os, sys
print("ECHO " + json.dumps({"argv": sys.argv[1:], "executable": sys.executable, "rank": os.environ.get("RANK"),
                            "port": os.environ.get("MASTER_PORT"),
                            "ds_fields": os.environ.get("ACCELERATE_CONFIG_DS_FIELDS")}))
"""


@pytest.mark.slow
@pytest.mark.train
@pytest.mark.parametrize("launcher", ["accelerate", "deepspeed"])
def test_launcher_module_forms_run_the_script_with_the_chosen_interpreter(workdir, run_dir, launcher):
    """`python -m accelerate.commands.launch` / `python -m deepspeed.launcher.runner` exist in the installed
    packages and start the ranks with that same interpreter (they use sys.executable)."""
    if importlib.util.find_spec(launcher) is None or importlib.util.find_spec("deepspeed") is None:
        pytest.skip(f"{launcher} or deepspeed is not installed")
    (workdir / "echo.py").write_text(RANK_ECHO)
    preset = Preset(name="one", launcher=launcher, accelerate={**ACCELERATE_DS, "num_processes": 1}, deepspeed=ZERO2)
    args = ["--deepspeed_config", "{ds_config}", *HOSTILE]
    plan = build_plan(LaunchRequest(script="echo.py", script_args=args, preset=preset, python=PY, cwd=workdir),
                      run_dir)
    assert plan.errors == []
    run_dir.mkdir(parents=True)
    for name, text in plan.files.items():
        (run_dir / name).write_text(text)
    done = subprocess.run(plan.argv, env=plan.env, cwd=plan.cwd, capture_output=True, text=True, timeout=590)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("ECHO ")]
    seen = json.loads(line[5:])
    assert Path(seen["executable"]) == Path(PY)
    assert seen["port"] == str(plan.master_port) and seen["rank"] == "0"
    script_args = [a for a in seen["argv"] if not a.startswith("--local_rank")]  # deepspeed adds --local_rank=0
    assert script_args == ["--deepspeed_config", str(run_dir / DS_CONFIG), *HOSTILE]
    if launcher == "accelerate":
        # What accelerate hands its DeepSpeed plugin: it raises when any of these came from the YAML too.
        fields = set(seen["ds_fields"].split(","))
        assert "deepspeed_config_file" in fields
        assert not fields & {"mixed_precision", "zero_stage", "gradient_accumulation_steps", "gradient_clipping",
                             "offload_optimizer_device"}


# ---- the preset's environment -------------------------------------------------------------------------------------

def test_the_cpu_demo_plan_runs_on_the_cpu_accelerator_and_a_gpu_preset_plan_does_not(workdir, run_dir):
    from traindeck.backend.presets import load_preset

    base = {"PATH": "/usr/bin", "HOME": "/home/u"}
    demo = plan_for(workdir, run_dir, preset=load_preset("cpu-demo"), base_env=base)
    assert demo.env["DS_ACCELERATOR"] == "cpu"
    gpu = plan_for(workdir, run_dir, preset=load_preset("zero2"), base_env=base)
    assert "DS_ACCELERATOR" not in gpu.env
    # The user's own variables win over the preset's; the preset's win over what the run inherits.
    mine = plan_for(workdir, run_dir, preset=load_preset("cpu-demo"), base_env=base, env={"DS_ACCELERATOR": "cuda"})
    assert mine.env["DS_ACCELERATOR"] == "cuda"
    inherited = plan_for(workdir, run_dir, preset=load_preset("cpu-demo"), base_env={**base, "DS_ACCELERATOR": "cuda"})
    assert inherited.env["DS_ACCELERATOR"] == "cpu"


def test_traindeck_run_with_the_cpu_demo_preset_gets_the_cpu_accelerator(workdir, run_dir, monkeypatch):
    import argparse

    from traindeck.backend.cli.run_inputs import launch_request

    monkeypatch.chdir(workdir)
    args = argparse.Namespace(preset="cpu-demo", config=None, ssh_port=None, hostfile=None, launcher=None,
                              nproc=None, python=PY, stop_on_nan=False)
    request = launch_request(args, "train.py", [], None)
    plan = build_plan(request, run_dir, base_env={"PATH": "/usr/bin"}, helpers=Path("/opt/td/pyhelpers"),
                      is_port_busy=lambda port: False, free_port=lambda: PORT)
    assert plan.env["DS_ACCELERATOR"] == "cpu" and plan.launcher == "deepspeed"


def test_a_wrong_env_in_a_preset_edited_in_memory_is_an_error_not_a_crash(workdir, run_dir):
    from traindeck.backend.presets import load_preset

    preset = load_preset("cpu-demo")
    preset.env = {"BAD NAME": "x"}
    plan = plan_for(workdir, run_dir, preset=preset)
    assert not plan.ok and any("'BAD NAME' is not an environment variable name" in e for e in plan.errors)
    assert "BAD NAME" not in plan.env


@pytest.mark.parametrize(("fsdp", "stops"), [
    ({"fsdp_sync_module_states": True}, True),
    ({}, True),  # accelerate launch turns fsdp_sync_module_states on unless the config says false
    ({"fsdp_sync_module_states": False}, False),
    ({"fsdp_version": 2, "fsdp_sync_module_states": True}, False),  # FSDP2 drops the setting: no device sought
])
def test_fsdp_without_cuda_names_what_accelerate_does_with_its_sync_setting(fsdp, stops) -> None:
    """Which of accelerate's two outcomes on a machine without CUDA the refusal names (each seen by running
    accelerate launch on such a config: a RuntimeError in every process, or processes of distributed type NO)."""
    from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE, accelerate_system_problems

    cpu = TrainingEnvironment(python=PY, python_version="3.11.7", torch="2.13.0+cpu", cuda_available=False)
    (said,) = accelerate_system_problems({"distributed_type": "FSDP", "num_processes": 3, "fsdp_config": fsdp}, cpu)
    assert (ACCELERATE_NO_DEVICE in said, "distributed type NO" in said) == (stops, not stops)
    assert "--launcher torchrun --nproc 3" in said  # the config's processes when the launch names none
    gpu = TrainingEnvironment(python=PY, python_version="3.11.7", torch="2.13.0", cuda_available=True)
    assert accelerate_system_problems({"distributed_type": "FSDP", "fsdp_config": fsdp}, gpu) == []


def test_fsdp_without_cuda_is_two_short_sentences_with_accelerates_words_quoted_once() -> None:
    from traindeck.backend.launch.builders import ACCELERATE_NO_DEVICE, accelerate_system_problems

    cpu = TrainingEnvironment(python=PY, python_version="3.11.7", torch="2.13.0+cpu", cuda_available=False)
    config = {"distributed_type": "FSDP", "num_processes": 4, "mixed_precision": "bf16",
              "fsdp_config": {"fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_sync_module_states": True}}
    (said,) = accelerate_system_problems(config, cpu)
    first, second = said.split(f'"{ACCELERATE_NO_DEVICE}" ')
    assert first == f"FSDP under accelerate needs CUDA, which {PY} lacks: with fsdp_sync_module_states on, " \
                    "every process stops with "
    assert second == ("To shard on CPU ranks instead, launch with --launcher torchrun --nproc 4 and have the script "
                      "call fully_shard(module, reshard_after_forward=True, mp_policy=MixedPrecisionPolicy("
                      "param_dtype=torch.bfloat16)) on each layer, then on the model.")
    assert said.count('"') == 2 and "rank(s)" not in said and '.";' not in said
    assert first.count(":") == 1  # one colon outside accelerate's words


def test_fsdp_without_cuda_offers_no_one_rank_sharding_and_no_per_layer_call_under_no_wrap() -> None:
    from traindeck.backend.launch.builders import accelerate_system_problems

    cpu = TrainingEnvironment(python=PY, python_version="3.11.7", torch="2.13.0+cpu", cuda_available=False)
    (unset,) = accelerate_system_problems({"distributed_type": "FSDP", "fsdp_config": {
        "fsdp_auto_wrap_policy": "NO_WRAP"}}, cpu)  # no num_processes: the config does not say how many
    assert "--nproc 1" not in unset and "--launcher torchrun --nproc N (two or more)" in unset
    assert "fully_shard(model, reshard_after_forward=True) on the whole model only." in unset
    assert "each layer" not in unset
    (one,) = accelerate_system_problems({"distributed_type": "FSDP", "fsdp_config": {}}, cpu, nproc=1)
    assert "--nproc N (two or more)" in one and "on the whole model only" in one  # NO_WRAP is accelerate's default
