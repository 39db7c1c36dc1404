"""From what the user asked for (preset or config file, script, arguments, launcher) to a LaunchPlan.

What is started is a script file, a module (`python -m`) or a command (an executable or console script found on
the run's PATH), each told to its launcher with the launcher's own flag: accelerate `--module`/`--no_python`,
deepspeed `--module`/`--no_python`, torchrun `--module`/`--no-python`; plain python runs `python -m MODULE` or the
command itself. A command that starts its own launcher (a console script running torchrun) is run as it is, with
the python launcher and one process: its ranks are found in the process tree as any launcher's are.

Building starts no process. The only things it looks at outside its arguments are files it must read (a config
file given directly, whether the script exists, where a command is on PATH) and, through the functions passed in,
whether a port is free.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from traindeck.backend.config import referenced
from traindeck.backend.config.source import load_file
from traindeck.backend.config.validate import referenced_deepspeed_file
from traindeck.backend.launch.config_files import (  # noqa: F401  (re-exported: the builder's callers use them)
    ACCELERATE_CONFIG,
    DS_CONFIG,
    INLINE_DEEPSPEED_KEYS,
    accelerate_pointing_at,
    render_sections,
)
from traindeck.backend.launch.environ import (
    python_problem,
    resolve_python,
    training_env,
    unchosen_python_note,
)
from traindeck.backend.launch.plan import Entry, Launcher, LaunchPlan
from traindeck.backend.launch.ports import busy_port_message, pick_free_port, port_in_use
from traindeck.backend.launch.probe import TrainingEnvironment, problems_for
from traindeck.backend.nodes.accelerate_nodes import accelerate_nodes_of, deepspeed_runner
from traindeck.backend.nodes.envfile import LINE_FORWARDER, NODE_DIR_ENV, node_run_dir
from traindeck.backend.nodes.node_plan import multi_node
from traindeck.backend.presets import Preset, PresetError, check_env

DS_CONFIG_PLACEHOLDER = "{ds_config}"
LAUNCHERS: tuple[Launcher, ...] = ("accelerate", "deepspeed", "python", "torchrun")
ENTRIES: tuple[Entry, ...] = ("script", "module", "command")
# A command that is one of these words runs the training interpreter (not the first one on PATH).
PYTHON_COMMANDS = ("python", "python3")
_CPU_RANKS = "ACCELERATE_USE_CPU"  # read by accelerate's PartialState in each rank: train on the CPU
# How each launcher is told that its target is a module or a command (its own parser's flags).
_ENTRY_FLAGS: dict[str, dict[str, str]] = {
    "accelerate": {"module": "--module", "command": "--no_python"},
    "deepspeed": {"module": "--module", "command": "--no_python"},
    "torchrun": {"module": "--module", "command": "--no-python"},
}


@dataclass(frozen=True, kw_only=True)
class LaunchRequest:
    """What the user asked for, before anything is decided. Only `script` is required."""

    script: str  # the script file, or with `entry` the module name or the command (executable or console script)
    script_args: Sequence[str] = ()  # passed to the script verbatim; `{ds_config}` is the one substitution
    preset: Preset | None = None
    config_file: Path | None = None  # an accelerate YAML or a DeepSpeed JSON given directly (instead of a preset)
    launcher: Launcher | None = None  # None: the preset's, else from the config file's kind, else python
    nproc: int | None = None  # None: the preset's process count, else the accelerate config's num_processes, else 1
    python: str | None = None  # the training interpreter; None: this Python (a frozen app: python3 on PATH)
    cwd: Path | None = None  # None: the current directory
    # The user's own variables: over the inherited environment and over the preset's env.
    env: Mapping[str, str] = field(default_factory=dict)
    master_port: int | None = None  # None: a free port is picked
    # DeepSpeed launcher only.
    num_nodes: int | None = None
    include: str | None = None  # e.g. "localhost:0,2"; replaces --num_gpus
    hostfile: Path | None = None
    ssh_port: int | None = None  # with a hostfile: the nodes' SSH port
    # GPUs to run on, by NVML index (`--gpus 0,2`); None: the launcher's default (every visible GPU).
    gpus: tuple[int, ...] | None = None
    entry: Entry = "script"  # what `script` names: a script file, a module (`-m`), or a command


def render_config_files(preset: Preset, run_dir: Path) -> dict[str, str]:
    """A preset's config files as they are written into `run_dir` (config_files.render_sections says how)."""
    return render_sections(preset.accelerate, preset.deepspeed, run_dir)


def build_plan(
    request: LaunchRequest,
    run_dir: Path,
    *,
    environment: TrainingEnvironment | None = None,
    base_env: Mapping[str, str] | None = None,
    helpers: Path | None = None,
    is_port_busy: Callable[[int], bool] = port_in_use,
    free_port: Callable[[], int] = pick_free_port,
) -> LaunchPlan:
    """Decide argv, environment and config files for one run whose directory will be `run_dir`.

    Never raises for the user's mistakes: they come back in `plan.errors` (a plan with errors must not be
    started) and doubtful points in `plan.warnings`. `environment` (from probe_environment) adds what the training
    interpreter lacks; `base_env` (default os.environ) is what the run inherits; the two port functions are the
    only system access and can be replaced in tests.
    """
    errors: list[str] = []
    warnings: list[str] = []
    run_dir = Path(run_dir).absolute()
    cwd = str(Path(request.cwd).absolute()) if request.cwd else os.getcwd()
    python = resolve_python(request.python)
    problem = python_problem(python)
    if problem:
        errors.append(problem)
    note = unchosen_python_note(request.python, python)
    if note:
        (errors if problem else warnings).append(note)

    if request.preset is not None and request.config_file is not None:
        errors.append("give a preset or a config file, not both")
    files, accelerate, kind = _config_files(request, run_dir, cwd, errors, warnings)
    launcher: Launcher = request.launcher or (request.preset.launcher if request.preset else kind or "python")
    if launcher not in LAUNCHERS:
        errors.append(f"unknown launcher {launcher!r}: choose one of {', '.join(LAUNCHERS)}")
        launcher = "python"
    ds_path = str(run_dir / DS_CONFIG) if DS_CONFIG in files else None

    if request.nproc is not None:
        nproc = request.nproc
    elif request.gpus and launcher != "python":  # one rank per chosen GPU
        nproc = len(request.gpus)
    elif request.preset is not None:  # its num_processes (deepspeed/python presets), else the accelerate config's
        nproc = request.preset.process_count()
    else:
        nproc = _int_or(accelerate, "num_processes", 1)
    if nproc < 1:
        errors.append(f"the number of processes must be at least 1, not {nproc}")
        nproc = 1

    preset_env = _preset_env(request.preset, errors)
    env = training_env(request.env, base=base_env, helpers=helpers, python=python,
                       site_dirs=environment.site_dirs if environment is not None else (), preset_env=preset_env)
    if request.gpus is not None:
        _pin_gpus(env, launcher, request.gpus, errors)
    args = _script_args(request.script_args, ds_path, errors)
    target = _target(request, cwd, env, errors, python, warnings)
    # Plain python with several processes goes through torchrun, and is told its target as torchrun is.
    runner = "torchrun" if launcher == "python" and nproc > 1 else launcher

    fixed_port = request.master_port
    if fixed_port is None and launcher == "accelerate":
        fixed_port = _int_or(accelerate, "main_process_port", None)
    port: int | None = None
    if launcher != "python" or nproc > 1:
        port = _rendezvous_port(fixed_port, is_port_busy, free_port, errors)

    if launcher == "accelerate":
        if ACCELERATE_CONFIG not in files:
            minimal = _minimal_accelerate(nproc, ds_path, environment)
            files[ACCELERATE_CONFIG] = yaml.safe_dump(minimal, sort_keys=False)
            if minimal["distributed_type"] == "MULTI_GPU" and _cpu_only(environment):
                env.setdefault(_CPU_RANKS, "true")  # the user's own value stays
            warnings.append(f"no accelerate config given: using a minimal one ({ACCELERATE_CONFIG} in the run "
                            "directory)")
        argv = [python, "-m", "accelerate.commands.launch", "--config_file", str(run_dir / ACCELERATE_CONFIG),
                "--main_process_port", str(port)]
        if request.gpus:
            argv += ["--gpu_ids", ",".join(map(str, request.gpus))]
        if request.nproc is not None or request.gpus:
            argv += ["--num_processes", str(nproc)]
        if fixed_port is None and _int_or(accelerate, "num_machines", 1) > 1:
            warnings.append("several machines: set main_process_port in the accelerate config (or a fixed port) so "
                            "every machine uses the same one")
        if relays_node_output(accelerate):
            env.setdefault(LINE_FORWARDER, "1")  # the user's own value (0: off) stays
            if accelerate_nodes_of(accelerate, argv, str(cwd), python):
                # Node agents will watch the machines: each rank times its steps and dumps its stacks into a folder
                # of its machine and the agents send them back (accelerate copies this environment to every node).
                env.setdefault(NODE_DIR_ENV, node_run_dir(run_dir.name))
    elif launcher == "deepspeed":
        argv, nproc = _deepspeed_argv(request, python, nproc, port, env, errors, warnings)
        if request.hostfile is not None:  # every node through DeepSpeed's pdsh runner (backend/nodes)
            # The preset's variables travel to every node too, under the user's own.
            nodes = multi_node(request.hostfile, run_dir, ssh_port=request.ssh_port,
                               overrides={**preset_env, **request.env}, env=env, cwd=cwd, python=python,
                               include=_option_in(argv, "--include"), num_nodes=request.num_nodes,
                               num_gpus=int(_option_in(argv, "--num_gpus") or 0) or None)
            argv += nodes.argv
            files.update(nodes.files)
            env.update(nodes.env)
            errors += nodes.errors
            warnings += nodes.warnings
            nproc = nodes.ranks or nproc
        if request.entry == "command":
            warnings.append(deepspeed_command_note(target, python))
        if ds_path and not _mentions_deepspeed_config(request.script_args):
            warnings.append("the script is not given the DeepSpeed config: add `--deepspeed_config {ds_config}` "
                            "(HF Trainer scripts: `--deepspeed {ds_config}`) to its arguments")
    elif runner == "torchrun":
        # The static rendezvous on the port picked (or fixed) above: torchrun's --standalone would pick a port of
        # its own, which traindeck could neither check nor show.
        argv = [python, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_port", str(port)]
        if launcher == "python":
            warnings.append(f"plain python with {nproc} processes: started through torch.distributed.run (torchrun)")
    elif request.entry == "command":
        argv = []
    else:
        argv = [python, "-m"] if request.entry == "module" else [python]
    flag = _ENTRY_FLAGS.get(runner, {}).get(request.entry)
    argv += [*([flag] if flag else []), target, *args]

    if launcher != "accelerate" and ACCELERATE_CONFIG in files:
        warnings.append(f"the {launcher} launcher does not read the accelerate config; it is kept in the run "
                        "directory for reference only")
    if launcher != "deepspeed":
        for name, value in (("num_nodes", request.num_nodes), ("include", request.include),
                            ("hostfile", request.hostfile), ("ssh_port", request.ssh_port)):
            if value is not None:
                warnings.append(f"{name} applies to the deepspeed launcher only and is ignored")
    if environment is not None and argv[:1] == [python]:  # a command alone brings its own interpreter
        errors += problems_for(environment, launcher, needs_deepspeed=ds_path is not None)
        warnings += hardware_notes(environment, launcher, nproc, request)
    if launcher == "accelerate":
        errors += accelerate_system_problems(accelerate, environment, nproc)
    nvme_errors, nvme_warnings = nvme_problems(_ds_data(files.get(DS_CONFIG), request.preset))
    errors += nvme_errors
    warnings += nvme_warnings

    return LaunchPlan(launcher=launcher, argv=argv, env=env, cwd=cwd, nproc=nproc, master_port=port,
                      port_fixed=port is not None and fixed_port is not None, files=files, errors=errors,
                      warnings=warnings, python=python, run_dir=str(run_dir), ds_config_path=ds_path,
                      entry=request.entry)


def _target(request: LaunchRequest, cwd: str, env: Mapping[str, str], errors: list[str], python: str,
            warnings: list[str]) -> str:
    """What the launcher is given to start: the script as given, the module name, or the command's executable
    (a bare name resolved on the run's PATH, so the recorded command says which one ran). A command that is
    exactly `python` or `python3` is the training interpreter `python`: the one the page and --python chose, with
    torch and the launchers, not whichever comes first on PATH (a pyenv shim, the system's)."""
    name = request.script
    looks_like_module = bool(name) and all(part.isidentifier() for part in name.split("."))
    if request.entry not in ENTRIES:
        errors.append(f"unknown entry {request.entry!r}: choose one of {', '.join(ENTRIES)}")
    elif request.entry == "module":
        if not looks_like_module:
            errors.append(f"not a module name: {name!r} (a dotted name such as pkg.train)")
    elif request.entry == "command":
        if os.sep in name:
            path = Path(cwd) / name
            if not path.is_file() or not os.access(path, os.X_OK):
                errors.append(f"command not found or not executable: {name} (in {cwd})")
            return name
        found = shutil.which(name, path=env.get("PATH", os.defpath)) if name else None
        if name in PYTHON_COMMANDS:
            other = f", not {found} (the first {name} on the run's PATH)" if found and not _same_path(found, python) \
                else ""
            warnings.append(f"the command's {name} is the training interpreter {python}{other}; give a path to run "
                            "another Python")
            return python
        if found is None:
            errors.append(f"command not found on the run's PATH: {name}")
            return name
        return found
    elif not (Path(cwd) / name).is_file():
        hint = ""
        if name and os.sep not in name and shutil.which(name, path=env.get("PATH", os.defpath)):
            hint = f"; to run the command {name}, give it as a command (traindeck run --command -- {name} ...)"
        elif looks_like_module and "." in name:
            hint = f"; to run the module {name}, give it as a module (traindeck run -m {name} ...)"
        errors.append(f"script not found: {name} (in {cwd}){hint}")
    return name


def deepspeed_command_note(command: str, python: str) -> str:
    """What DeepSpeed's launcher does to a command (launch.py with --no_python): it starts `COMMAND --local_rank=N
    ARGS`, the rank's argument first, unless told --no_local_rank (which traindeck never passes: a DeepSpeed script
    expects the argument)."""
    note = ("the deepspeed launcher runs a command as `COMMAND --local_rank=N ARGS`: it puts --local_rank=N before "
            "the command's own arguments, so a command that does not take --local_rank stops at once")
    if _same_path(command, python) or re.fullmatch(r"python[\d.]*", os.path.basename(command)):
        note += ("; Python itself refuses it (\"unknown option --local_rank=0\"): choose Script "
                 "or Module (traindeck run SCRIPT / -m MODULE), which DeepSpeed starts with the training Python, or "
                 "the torchrun launcher, which passes the rank in LOCAL_RANK only")
    else:
        note += "; the torchrun launcher passes the rank in LOCAL_RANK only"
    return note


def _same_path(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def _config_files(request: LaunchRequest, run_dir: Path, cwd: str, errors: list[str], warnings: list[str]
                  ) -> tuple[dict[str, str], dict[str, Any] | None, Launcher | None]:
    """(files for the run directory, the accelerate config as data, the config file's kind)."""
    if request.preset is not None:
        return render_config_files(request.preset, run_dir), request.preset.accelerate, None
    if request.config_file is None:
        return {}, None, None
    path = Path(request.config_file)
    if not path.is_absolute():
        path = Path(cwd) / path
    doc = load_file(path)
    if doc.data is None:
        errors += [m.format() for m in doc.syntax] or [f"cannot read the config file {path}"]
        return {}, None, None
    if doc.kind == "deepspeed":
        return {DS_CONFIG: doc.text}, None, "deepspeed"
    files: dict[str, str] = {ACCELERATE_CONFIG: doc.text}
    accelerate: dict[str, Any] = doc.data
    # Found as `accelerate launch` run from the run's working directory finds it (config/referenced.py), and
    # said when the YAML's own folder holds another file, or the only one.
    # The run's copy of the YAML names the snapshot by absolute path, so a file found only beside the YAML still
    # works here: that is said (a hand-run `accelerate launch` from the same folder would stop) and used.
    ref_file = referenced_deepspeed_file(doc, cwd=cwd)
    beside = next((r.beside for r in referenced.references(doc.data, doc.file, Path(cwd))
                   if r.key[1] == "deepspeed_config_file" and r.beside is not None and r.beside.is_file()), None)
    for severity, key, text in referenced.findings(doc.data, doc.file, Path(cwd)) if beside else []:
        if key == ("deepspeed_config", "deepspeed_config_file"):
            if severity == "error":
                ref_file, text = beside, text + "; this run uses the YAML's folder's file"
            warnings.append(f"{path}: deepspeed_config.deepspeed_config_file: {text}")
    if ref_file is not None:
        # Snapshot the DeepSpeed config into the run directory too, and point the copy of the YAML at it, so the
        # run keeps working (and can be re-run) when the user edits or moves the original.
        ds_file = ref_file
        try:
            files[DS_CONFIG] = ds_file.read_text(encoding="utf-8-sig")
        except OSError as exc:
            errors.append(f"{path}: deepspeed_config.deepspeed_config_file {ds_file} cannot be read: "
                          f"{exc.strerror or exc}")
        else:
            section = dict(accelerate.get("deepspeed_config") or {})
            section["deepspeed_config_file"] = str(run_dir / DS_CONFIG)
            files[ACCELERATE_CONFIG] = yaml.safe_dump({**accelerate, "deepspeed_config": section}, sort_keys=False)
    return files, accelerate, "accelerate"


def _preset_env(preset: Preset | None, errors: list[str]) -> dict[str, str]:
    """The variables the preset's runs need (a preset edited in memory may hold a wrong one: said, and left out)."""
    if preset is None or not preset.env:
        return {}
    try:
        check_env(preset.env)
    except PresetError as exc:
        errors.append(f"preset '{preset.name}': {exc}")
        return {}
    return dict(preset.env)


def _script_args(args: Sequence[str], ds_path: str | None, errors: list[str]) -> list[str]:
    if any(DS_CONFIG_PLACEHOLDER in a for a in args):
        if ds_path is None:
            errors.append("the script arguments use {ds_config} but this run has no DeepSpeed config (choose a "
                          "preset with a DeepSpeed section or give a ds_config.json)")
            return list(args)
        return [a.replace(DS_CONFIG_PLACEHOLDER, ds_path) for a in args]
    return list(args)


def _mentions_deepspeed_config(args: Sequence[str]) -> bool:
    return any(DS_CONFIG_PLACEHOLDER in a or a.split("=", 1)[0] in ("--deepspeed_config", "--deepspeed")
               for a in args)


def _int_or(data: Mapping[str, Any] | None, key: str, default: int | None) -> Any:
    value = (data or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _rendezvous_port(fixed: int | None, is_port_busy: Callable[[int], bool], free_port: Callable[[], int],
                     errors: list[str]) -> int:
    if fixed is None:
        return free_port()
    if not 1 <= fixed <= 65535:
        errors.append(f"port {fixed} is not a valid port number (1-65535)")
    elif is_port_busy(fixed):
        errors.append(busy_port_message(fixed))
    return fixed


def _cpu_only(environment: TrainingEnvironment | None) -> bool:
    return environment is not None and environment.cuda_available is False


def _minimal_accelerate(nproc: int, ds_path: str | None, environment: TrainingEnvironment | None
                        ) -> dict[str, Any]:
    """The accelerate config of a run given none. Several processes are MULTI_GPU also without CUDA: accelerate
    launch starts them through torchrun only for MULTI_GPU (MULTI_CPU starts one, or several through mpirun with
    an mpirun hostfile), and on the CPU ACCELERATE_USE_CPU in the run's environment (`_CPU_RANKS`) makes each rank
    train there with gloo; use_cpu in the config would choose the one-process launcher."""
    cpu_only = _cpu_only(environment)
    if ds_path:
        distributed, extra = "DEEPSPEED", {"deepspeed_config": {"deepspeed_config_file": ds_path}}
    elif nproc > 1:
        distributed, extra = "MULTI_GPU", {}
    else:
        distributed, extra = "NO", {}
    return {"compute_environment": "LOCAL_MACHINE", "distributed_type": distributed, "num_machines": 1,
            "machine_rank": 0, "num_processes": nproc, "use_cpu": cpu_only and distributed == "NO", **extra}


def _pin_gpus(env: dict[str, str], launcher: Launcher, gpus: Sequence[int], errors: list[str]) -> None:
    """Pin a run to GPUs by NVML index. CUDA numbers GPUs fastest first unless told PCI bus order, which is
    NVML's: without CUDA_DEVICE_ORDER, "GPU 2" could be another card. accelerate (--gpu_ids) and deepspeed
    (--include) set CUDA_VISIBLE_DEVICES themselves, from physical indexes: an inherited one is dropped."""
    if not gpus or any(g < 0 for g in gpus):
        errors.append("--gpus: give at least one GPU index (0 or more)")
        return
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if launcher in ("python", "torchrun"):  # torchrun has no GPU choice of its own
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
    else:
        env.pop("CUDA_VISIBLE_DEVICES", None)


def _deepspeed_argv(request: LaunchRequest, python: str, nproc: int, port: int | None, env: Mapping[str, str],
                    errors: list[str], warnings: list[str]) -> tuple[list[str], int]:
    include = request.include
    if request.gpus:
        if include is not None:
            errors.append("give --gpus or an --include filter, not both")
        include = "localhost:" + ",".join(map(str, request.gpus))
    multi_node = request.hostfile is not None or (request.num_nodes or 1) > 1
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if include is None and not multi_node and visible:
        # The deepspeed runner drops CUDA_VISIBLE_DEVICES whenever --num_gpus is given and then numbers GPUs
        # from 0, which would run on the wrong cards; --include keeps the user's choice.
        ids = [i.strip() for i in visible.split(",") if i.strip()]
        if nproc > len(ids):
            errors.append(f"{nproc} processes asked for but CUDA_VISIBLE_DEVICES={visible} shows {len(ids)} GPU(s)")
        include = "localhost:" + ",".join(ids[:nproc])
        warnings.append(f"CUDA_VISIBLE_DEVICES={visible}: passed to deepspeed as --include {include}")
    argv = [python, "-m", "deepspeed.launcher.runner"]
    if include is not None:
        if request.num_nodes is not None:
            errors.append("deepspeed refuses --num_nodes together with --include: give one of them")
        argv += ["--include", include]
        nproc = _slots_in(include) or nproc
    elif request.hostfile is None or request.nproc is not None:  # with a hostfile: each host's slots
        argv += ["--num_gpus", str(nproc)]
    argv += ["--master_port", str(port)]
    if request.num_nodes is not None and include is None:
        if request.num_nodes < 1:
            errors.append(f"the number of nodes must be at least 1, not {request.num_nodes}")
        argv += ["--num_nodes", str(request.num_nodes)]
    return argv, nproc


def _option_in(argv: Sequence[str], name: str) -> str | None:
    """The value after `name` in the runner's argv, or None."""
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


def _slots_in(include: str) -> int | None:
    """Processes an --include filter starts ("host1:0,1@host2:2" -> 3), or None when it names whole hosts."""
    total = 0
    for host in include.split("@"):
        _, sep, slots = host.partition(":")
        if not sep:
            return None
        total += len([s for s in slots.split(",") if s.strip()])
    return total or None


def hardware_notes(environment: TrainingEnvironment, launcher: Launcher, nproc: int,
                   request: LaunchRequest) -> list[str]:
    """What the training interpreter's hardware means for this launch (no CUDA: the run uses the CPU), as the
    plan's warnings and the preview's notes say it."""
    if environment.error or environment.torch_error:
        return []
    if environment.cuda_available is False and (launcher != "python" or nproc > 1):
        return [f"CUDA is not available in {environment.python}: the run uses the CPU"]
    single_node = request.hostfile is None and (request.num_nodes or 1) == 1
    count = environment.device_count or 0
    if environment.cuda_available and single_node and nproc > count:
        return [f"{nproc} processes but {count} GPU(s) visible in {environment.python}: NCCL needs a GPU per rank"]
    return []


# ---- What this machine cannot run, said before start ------------------------------------------------------------
# accelerate's FSDP and Megatron-LM need GPUs; ZeRO-Infinity needs a writable nvme_path and DeepSpeed's async_io op
# (libaio's headers). The words quoted are accelerate's own; tests/launch/test_seed_systems.py runs accelerate on
# this machine to check they are still what it says. A launch refuses with these lines, and `config check` warns
# with the same ones (the file is valid; the machine is what cannot run it).

ACCELERATE_NO_DEVICE = ("There are currently no available devices found, must be one of 'XPU', 'CUDA', 'MLU', "
                        "'NPU', 'MUSA', or 'HPU'.")
ACCELERATE_NO_MEGATRON = "Megatron is not installed. please build it from source."
LIBAIO_HEADER = "/usr/include/libaio.h"
LIBAIO_APT = "sudo apt-get install -y libaio-dev"
# The distributed types accelerate_system_problems judges: whether they can run depends on the machine.
MACHINE_BOUND = ("FSDP", "MEGATRON_LM")
_FSDP1_RESHARD = {"FULL_SHARD": True, "1": True, "SHARD_GRAD_OP": False, "2": False, "HYBRID_SHARD": True,
                  "4": True, "HYBRID_SHARD_ZERO2": False, "5": False}


def relays_node_output(accelerate: Mapping[str, Any] | None) -> bool:
    """Whether an accelerate config starts several machines through one of DeepSpeed's multi-node runners (pdsh,
    openmpi, ...): their output reaches this machine through a forwarder that passes whole lines only, so a rank's
    carriage-return progress bar must become lines there (TRAINDECK_LINE_FORWARDER; accelerate copies this
    environment to every node through DeepSpeed's .deepspeed_env). Its "standard" launcher runs torchrun on each
    machine, whose output stays there."""
    runner = deepspeed_runner(accelerate)
    return runner is not None and runner[0] > 1 and runner[1] != "standard"


def machine_bound(accelerate: Any) -> bool:
    """Whether an accelerate config's distributed type is one that only some machines run (MACHINE_BOUND): the
    configs worth probing the training interpreter for."""
    return isinstance(accelerate, Mapping) and str(accelerate.get("distributed_type", "")).upper() in MACHINE_BOUND


def accelerate_system_problems(accelerate: Mapping[str, Any] | None, environment: TrainingEnvironment | None,
                               nproc: int | None = None) -> list[str]:
    """Errors for an accelerate config whose distributed type cannot run in the probed interpreter: FSDP or
    Megatron-LM where CUDA is not available, Megatron-LM without megatron-core. [] when unknown (no probe).
    `nproc`: the processes the launch starts (None: the config's num_processes, when it gives one)."""
    if environment is None or environment.error or environment.torch_error or not isinstance(accelerate, Mapping):
        return []
    kind = str(accelerate.get("distributed_type", "")).upper()
    py = environment.python
    if nproc is None:
        nproc = _int_or(accelerate, "num_processes", None)
    if kind == "FSDP" and environment.cuda_available is False:
        return [fsdp_without_gpu(accelerate, py, nproc)]
    if kind == "MEGATRON_LM":
        why = []
        if environment.cuda_available is False:
            why.append(f"CUDA is not available in {py}")
        if environment.site_dirs and not _has_megatron(environment.site_dirs):
            why.append(f"megatron-core (0.8 or newer, with megatron.training) is not installed for {py}, and "
                       f"accelerate stops with \"{ACCELERATE_NO_MEGATRON}\"")
        if why:
            return ["Megatron-LM (distributed_type MEGATRON_LM) cannot start here: " + "; ".join(why)]
    return []


def fsdp_without_gpu(accelerate: Mapping[str, Any], python: str, nproc: int | None) -> str:
    """Two sentences: what accelerate does with this FSDP config where CUDA is not available (its own words,
    quoted, where it stops), then the torchrun route that shards the same way on CPU ranks. `nproc`: the ranks
    the launch starts; None or 1 is said as "N" (one rank shards nothing)."""
    fsdp = accelerate.get("fsdp_config") or {}
    fsdp = fsdp if isinstance(fsdp, Mapping) else {}
    # accelerate's FSDP plugin looks for a device to sync module states on: FSDP1 only (FSDP2 drops the setting),
    # where `accelerate launch` turns the setting on unless the config says false.
    sync = str(fsdp.get("fsdp_sync_module_states", True)).lower() != "false"
    if sync and str(fsdp.get("fsdp_version", 1)) != "2":
        how = "" if "fsdp_sync_module_states" in fsdp else " (its default)"
        does = f"with fsdp_sync_module_states on{how}, every process stops with \"{ACCELERATE_NO_DEVICE}\""
    else:
        does = "every process starts as distributed type NO and trains the whole model unsharded."
    ranks = f"--nproc {nproc}" if nproc is not None and nproc > 1 else "--nproc N (two or more)"
    return (f"FSDP under accelerate needs CUDA, which {python} lacks: {does} To shard on CPU ranks instead, "
            f"launch with --launcher torchrun {ranks} and have the script call {fully_shard_call(accelerate)}.")


def fully_shard_call(accelerate: Mapping[str, Any]) -> str:
    """torch's FSDP2 call with the sharding an accelerate FSDP config asks for (reshard, CPU offload, precision),
    and where it goes: each layer then the model, or the whole model alone under NO_WRAP (accelerate's default
    policy), which wraps no layer."""
    fsdp = accelerate.get("fsdp_config") or {}
    fsdp = fsdp if isinstance(fsdp, Mapping) else {}
    if fsdp.get("fsdp_version") == 2:
        reshard = fsdp.get("fsdp_reshard_after_forward", True)
        reshard = reshard if isinstance(reshard, bool) else str(reshard).upper() != "SHARD_GRAD_OP"
    else:
        strategy = str(fsdp.get("fsdp_sharding_strategy", fsdp.get("fsdp_reshard_after_forward", "FULL_SHARD")))
        reshard = _FSDP1_RESHARD.get(strategy.upper(), True)
    args = [f"reshard_after_forward={reshard}"]
    if fsdp.get("fsdp_offload_params") is True:
        args.append("offload_policy=CPUOffloadPolicy()")
    precision = str(accelerate.get("mixed_precision", "no")).lower()
    if precision in ("bf16", "fp16"):
        dtype = "bfloat16" if precision == "bf16" else "float16"
        args.append(f"mp_policy=MixedPrecisionPolicy(param_dtype=torch.{dtype})")
    policy = fsdp.get("fsdp_auto_wrap_policy", fsdp.get("auto_wrap_policy", "NO_WRAP"))
    if str(policy).upper() == "NO_WRAP":
        return f"fully_shard(model, {', '.join(args)}) on the whole model only"
    return f"fully_shard(module, {', '.join(args)}) on each layer, then on the model"


def _has_megatron(site_dirs: Sequence[str]) -> bool:
    """megatron-core 0.8+ and megatron.training importable from one of the interpreter's site folders (what
    accelerate's is_megatron_lm_available asks)."""
    version_ok = training = False
    for folder in site_dirs:
        for info in glob.glob(os.path.join(glob.escape(folder), "megatron_core-*.dist-info")):
            parts = os.path.basename(info)[len("megatron_core-"):-len(".dist-info")].split(".")
            numbers = [int(p) if p.isdigit() else 0 for p in parts[:2]] + [0, 0]
            version_ok = version_ok or (numbers[0], numbers[1]) >= (0, 8)
        training = training or os.path.isdir(os.path.join(folder, "megatron", "training"))
    return version_ok and training


def nvme_paths(ds_config: Mapping[str, Any] | None) -> list[str]:
    """The nvme_path of every ZeRO offload section that offloads to NVMe, in config order, without repeats."""
    zero = (ds_config or {}).get("zero_optimization")
    out: list[str] = []
    for name in ("offload_param", "offload_optimizer"):
        section = zero.get(name) if isinstance(zero, Mapping) else None
        if isinstance(section, Mapping) and str(section.get("device", "")).lower() == "nvme":
            path = section.get("nvme_path")
            if isinstance(path, str) and path and path not in out:
                out.append(path)
    return out


def run_nvme_paths(run_dir: Path) -> list[str]:
    """The NVMe offload folders of the run whose directory is `run_dir` (from its ds_config.json), for the
    resource recorder to watch; [] when it has none or the file cannot be read."""
    try:
        return nvme_paths(json.loads((Path(run_dir) / DS_CONFIG).read_text(encoding="utf-8-sig")))
    except (OSError, ValueError, AttributeError):
        return []


def nvme_problems(ds_config: Mapping[str, Any] | None, *, header: str = LIBAIO_HEADER) -> tuple[list[str], list[str]]:
    """(errors, warnings) for the NVMe offload of a DeepSpeed config on this machine: an nvme_path that cannot be
    created or written stops the ranks in their first swap; without libaio's headers DeepSpeed cannot build its
    async_io op (said as a warning: an op prebuilt into DeepSpeed's install needs none)."""
    errors: list[str] = []
    warnings: list[str] = []
    paths = nvme_paths(ds_config)
    for path in paths:
        existing = Path(path)
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not os.path.isabs(path):
            warnings.append(f"nvme_path {path} is relative: DeepSpeed reads it from each rank's working directory")
        if not existing.is_dir():
            errors.append(f"nvme_path {path}: {existing} is not a folder, so DeepSpeed cannot create its swap files")
        elif not os.access(existing, os.W_OK | os.X_OK):
            errors.append(f"nvme_path {path}: {existing} is not writable, so DeepSpeed cannot create its swap files")
    if paths and not os.path.exists(header):
        warnings.append(f"NVMe offload uses DeepSpeed's async_io op, which builds only with libaio's headers "
                        f"({header} is missing): {LIBAIO_APT}")
    return errors, warnings


def _ds_data(text: str | None, preset: Preset | None) -> dict[str, Any] | None:
    if preset is not None and isinstance(preset.deepspeed, dict):
        return preset.deepspeed
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:  # hjson or broken: the config checks say so
        return None
    return data if isinstance(data, dict) else None


def nvme_leftovers(run_dir: Path) -> list[str]:
    """One line per NVMe offload folder of the run where DeepSpeed's swap files remain after the run (DeepSpeed
    removes them only when the next run starts): how many, how large, and where. [] when none remain."""
    lines = []
    for path in run_nvme_paths(run_dir):
        folder = Path(path) / "zero_stage_3"
        try:
            files = [p for p in folder.rglob("*.swp") if p.is_file()]
            size = sum(p.stat().st_size for p in files)
        except OSError:
            continue
        if files:
            lines.append(f"DeepSpeed left {len(files)} NVMe swap file(s), {size / 2**20:.0f} MiB, under {folder}: "
                         "remove that folder once no run uses it")
    return lines
