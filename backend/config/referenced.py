"""Files an accelerate config names (deepspeed_config_file, hostfiles), found where accelerate finds them.

accelerate never resolves these paths itself: `accelerate launch` hands the text on unchanged
(utils/launch.py prepare_deepspeed_cmd_env: ACCELERATE_DEEPSPEED_CONFIG_FILE = str(value); prepare_deepspeed_cmd:
`--hostfile <value>` to the deepspeed runner; prepare_simple_launcher_cmd_env: mpirun `--hostfile <value>`), and the
training processes open it with os.path.exists / open (utils/deepspeed.py HfDeepSpeedConfig.__init__), so a
relative path counts from the working directory `accelerate launch` ran in, never from the YAML's own folder,
and a leading "~" is not expanded (no shell is involved).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from traindeck.backend.config.messages import PathT, Severity


@dataclass(frozen=True)
class Reference:
    """A path key of an accelerate config and where it leads."""

    key: tuple[str, str]  # (section, key) in the YAML
    text: str  # as written
    used: Path  # what accelerate opens when launched from `cwd`
    beside: Path | None  # the same text from the YAML's folder, when that is another place


# (section, key, what it is) for every file path `accelerate launch` passes on.
PATH_KEYS: tuple[tuple[str, str, str], ...] = (
    ("deepspeed_config", "deepspeed_config_file", "DeepSpeed config"),
    ("deepspeed_config", "deepspeed_hostfile", "DeepSpeed hostfile"),
    ("mpirun_config", "mpirun_hostfile", "mpirun hostfile"),
)


def resolve(text: str, cwd: Path) -> Path:
    """The file accelerate's processes open for `text` when launched from `cwd`."""
    path = Path(text)
    return path if path.is_absolute() else Path(cwd) / path


def references(data: Any, file: str | None, cwd: Path) -> list[Reference]:
    """Every path key set in an accelerate config (accelerate reads "none" as no file)."""
    out: list[Reference] = []
    if not isinstance(data, dict):
        return out
    for section_name, key, _ in PATH_KEYS:
        # _validate_launch_command copies every section's keys into the launch args, but only the DeepSpeed launch
        # (distributed_type DEEPSPEED: utils/launch.py prepare_deepspeed_cmd_env) opens these files.
        if section_name == "deepspeed_config" and data.get("distributed_type") != "DEEPSPEED":
            continue
        section = data.get(section_name)
        text = section.get(key) if isinstance(section, dict) else None
        if not isinstance(text, str) or not text.strip() or text == "none":
            continue
        used = resolve(text, cwd)
        beside = Path(file).absolute().parent / text if file and not Path(text).is_absolute() else None
        if beside is not None and _same_place(beside, used):
            beside = None
        out.append(Reference((section_name, key), text, used, beside))
    return out


def _shown(path: Path) -> str:
    """A path as a person reads it: 'a/b/../c' as 'a/c' (display only: the checks use the path as written)."""
    return os.path.normpath(path)


def _same_place(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b) if a.exists() and b.exists() else a.absolute() == b.absolute()
    except OSError:
        return False


def _same_content(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def findings(data: Any, file: str | None, cwd: Path) -> list[tuple[Severity, PathT, str]]:
    """What a reviewer must know about the files the config names: missing where accelerate looks (and found by
    the YAML's folder instead), or a different file there than next to the YAML."""
    out: list[tuple[Severity, PathT, str]] = []
    what = {(s, k): w for s, k, w in PATH_KEYS}
    machines = data.get("num_machines", 1) if isinstance(data, dict) else 1
    for ref in references(data, file, cwd):
        name = what[ref.key]
        where = f"the working directory {cwd}" if not Path(ref.text).is_absolute() else "its absolute path"
        if ref.used.is_file():
            if ref.beside is not None and ref.beside.is_file() and not _same_content(ref.used, ref.beside):
                out.append(("warning", ref.key,
                            f"accelerate reads the {name} {_shown(ref.used)} (paths count from {where}), not "
                            f"{_shown(ref.beside)} next to this YAML, which is a different file; write the absolute "
                            f"path of the one you mean"))
            continue
        found = ref.beside is not None and ref.beside.is_file()
        tilde = ref.text.startswith("~")
        if ref.key[1] != "deepspeed_config_file" and not (isinstance(machines, int) and machines > 1
                                                         and (found or tilde)):
            # A hostfile is read only for a multi-machine launch (another rule says it is ignored otherwise), on
            # machine 0, which is often not where the config is checked: only a path mix-up is worth a word.
            continue
        if ref.key[1] == "deepspeed_config_file":
            stop = ("every process stops at start-up (\"Expected a string path to an existing deepspeed config\")")
        elif ref.key[1] == "deepspeed_hostfile":
            stop = ("DeepSpeed trains on this machine only (\"Unable to find hostfile, will proceed with training "
                    "with local resources only\")")
        else:
            stop = "mpirun cannot start the other machines"
        text = f"the {name} '{ref.text}' is not at {_shown(ref.used)}: accelerate opens it from {where}, and {stop}"
        if tilde:
            text += "; accelerate does not expand '~' (no shell reads this file): write the full path"
        elif found and ref.beside is not None and file:
            text += (f"; the YAML's folder has {_shown(ref.beside)}: launch from {_shown(Path(file).absolute().parent)}"
                     f" or write the absolute path")
        out.append(("error", ref.key, text))
    return out
