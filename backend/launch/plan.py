"""What a launch builder produces and the supervisor consumes."""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Launcher = Literal["accelerate", "deepspeed", "python", "torchrun"]
# What the launcher starts: a script file, a module (`python -m`), or a command on PATH (a console script, an
# executable): each launcher is told with its own flag (builders.py).
Entry = Literal["script", "module", "command"]


def default_run_name(target: str, entry: str, preset: str | None = None, taken: Collection[str] = ()) -> str:
    """A run's name when none is given: the script's stem, the module's last part, the command's file name, then
    `-PRESET` when the run uses a preset (`train_tiny-cpu-demo`), so runs of one script on different set-ups tell
    themselves apart in Runs, History and `runs list`. Preset names are letters, digits, '.', '_' and '-'
    (presets/model.py), so the name stays one word a shell and `runs show NAME` take as it is.

    `taken`: the names the run store's runs have (`RunStore.run_names`). When the name is among them, `-N` is
    added, one past the highest N a run of that name has (`train_tiny-cpu-demo-2`, `-3`), as W&B and
    TensorBoard number the runs of one name: runs of one set-up launched one after another stay told apart, and
    the newest has the highest number even after an older one was deleted."""
    if entry == "module":
        base = target.rpartition(".")[2]
    else:
        base = Path(target).name if entry == "command" else Path(target).stem
    name = f"{base}-{preset}" if preset else base
    if name not in taken:
        return name
    numbered = re.compile(re.escape(name) + r"-([0-9]+)")
    used = [int(m.group(1)) for m in map(numbered.fullmatch, taken) if m is not None]
    return f"{name}-{max(used, default=1) + 1}"


def target_words(target: str, entry: str, args: Sequence[str] = ()) -> list[str]:
    """What runs, as `traindeck run` is given it after its options: `train.py ARGS`, `-m pkg.train ARGS`, or the
    command and its arguments."""
    return ["-m", target, *args] if entry == "module" else [target, *args]


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start one run, decided before anything runs.

    `env` is the complete environment for the launcher, secrets included: it is handed to the process and never
    written to disk as it is (the run directory gets a masked copy). `files` are written into the run directory
    before launch (relative path -> text): the exported accelerate YAML, the ds_config.json.
    """

    launcher: Launcher
    argv: list[str]
    env: dict[str, str]
    cwd: str
    nproc: int = 1
    master_port: int | None = None
    # True when the user (or the accelerate config) fixed the port; False when traindeck picked a free one.
    port_fixed: bool = False
    files: dict[str, str] = field(default_factory=dict)
    # Problems found while building (missing module in the training interpreter, busy fixed port...): shown
    # before launch; a plan with any error must not be started.
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # The training interpreter (argv[0]) and the run directory the argv and config files refer to.
    python: str = ""
    run_dir: str = ""
    # Absolute path of the run's ds_config.json when the run has a DeepSpeed config (what `{ds_config}` became).
    ds_config_path: str | None = None
    entry: Entry = "script"

    @property
    def ok(self) -> bool:
        """True when the plan may be started (no errors)."""
        return not self.errors

    def command_line(self) -> str:
        """The argv as one shell-quoted line, for previews and the run directory's `command` file."""
        return shlex.join(self.argv)
