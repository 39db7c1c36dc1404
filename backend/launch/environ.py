"""The training job's interpreter and environment: which Python runs it, what it inherits, what may be written down.

Pure functions over mappings: nothing here starts a process or changes os.environ.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

# Which names and values are secrets is decided in backend/core/masking.py; re-exported for the launch code and the GUI.
from traindeck.backend.core.masking import MASK as MASK
from traindeck.backend.core.masking import SECRET_NAMES as SECRET_NAMES
from traindeck.backend.core.masking import is_secret_name as is_secret_name
from traindeck.backend.core.masking import masked_env as masked_env
from traindeck.backend.core.paths import resources_dir


def is_frozen() -> bool:
    """True inside a PyInstaller (or similar) bundle, where sys.executable is the app, not a Python."""
    return bool(getattr(sys, "frozen", False))


def resolve_python(choice: str | None) -> str:
    """The training interpreter: the user's choice, else this Python, else (in a frozen app) `python3` on PATH.

    Paths come back absolute, bare names resolved on PATH. A frozen app's own executable is never returned for
    "no choice"; if `python3` is not on PATH the bare name is returned and `python_problem` reports it.
    """
    if choice:
        choice = os.path.expanduser(choice)
        # Absolute now: the launcher starts in the run's cwd, where a relative path would mean something else.
        if os.sep in choice:
            return os.path.abspath(choice)
        return shutil.which(choice) or choice
    if is_frozen():
        return shutil.which("python3") or "python3"
    return sys.executable


def python_problem(python: str) -> str | None:
    """Why `python` cannot run training (missing, not executable, this frozen app itself), or None."""
    if is_frozen() and _same_file(python, sys.executable):
        return (f"{python} is traindeck's own executable, not a Python interpreter: choose the Python that has "
                "torch installed (--python PATH)")
    found = python if os.sep in python else shutil.which(python)
    if not found or not os.path.exists(found):
        return f"Python interpreter not found: {python} (choose one with --python PATH)"
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        return f"Python interpreter is not an executable file: {python}"
    return None


def unchosen_python_note(choice: str | None, python: str) -> str | None:
    """In a frozen app with no interpreter chosen: which one was taken and how to choose (None otherwise)."""
    if choice or not is_frozen():
        return None
    return ("no training interpreter chosen, and this standalone traindeck has no Python of its own: "
            f"{'using ' + python + ' from PATH' if os.sep in python else 'no python3 on PATH'}; choose the Python "
            "that has torch installed (--python PATH, or the interpreter on the Launch page)")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def unfrozen_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` as it was before a PyInstaller bootloader changed it.

    The bootloader points LD_LIBRARY_PATH (AIX: LIBPATH) at the bundle, saving the user's value in
    LD_LIBRARY_PATH_ORIG (LIBPATH_ORIG) or none when there was none; on macOS it unsets DYLD_LIBRARY_PATH (lost).
    A training Python must not load the bundle's libraries, and the run outlives the app, whose one-file bundle
    directory is deleted on exit, so variables pointing into the bundle (_PYI_*, runtime hooks' SSL_CERT_FILE...)
    are dropped too.
    """
    env = dict(environ)
    if not is_frozen():
        return env
    for var in ("LD_LIBRARY_PATH", "LIBPATH", "DYLD_LIBRARY_PATH", "DYLD_FRAMEWORK_PATH"):
        original = env.pop(var + "_ORIG", None)
        if original is not None:
            env[var] = original
        else:
            env.pop(var, None)
    bundle = getattr(sys, "_MEIPASS", None)
    for name in list(env):
        if name.startswith("_PYI_") or name == "_MEIPASS2" or (bundle and bundle in env[name]):
            del env[name]
    return env


def line_buffering_dir() -> Path:
    """Holds the sitecustomize.py that makes every process of a run line-buffer its stdout and stderr."""
    return Path(__file__).resolve().parent / "site_hook"


def pyhelpers_dir() -> Path:
    """Dependency-free helpers a training script may import (traindeck_report.py)."""
    return resources_dir() / "pyhelpers"


def torch_extensions_root() -> Path:
    """<user cache>/traindeck/torch_extensions. The XDG cache, not TRAINDECK_HOME: built ops are expensive and are
    keyed by interpreter, so every traindeck home (each test has its own) shares them."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "traindeck" / "torch_extensions"


def installed_torch_version(python: str, site_dirs: Sequence[str] = ()) -> str | None:
    """torch's version from its dist-info folder in `site_dirs` (from the probe) or, without them, in the
    interpreter's own prefix (a venv's lib/pythonX.Y/site-packages): no process is started, torch is not imported."""
    folders = [Path(d) for d in site_dirs]
    if not folders:
        prefix = Path(os.path.abspath(python)).parent.parent  # <venv>/bin/python -> <venv>, not the symlink target
        folders = sorted(prefix.glob("lib/python*/site-packages")) + sorted(prefix.glob("lib/python3/dist-packages"))
    for folder in folders:
        for info in sorted(folder.glob("torch-*.dist-info")):
            return info.name[len("torch-"):-len(".dist-info")]
    return None


def torch_extensions_dir(python: str, site_dirs: Sequence[str] = ()) -> Path:
    """The JIT-built ops folder for one training interpreter: torch_extensions_root()/<hash of the interpreter's
    path + torch version>. One folder per interpreter, because two interpreters sharing one folder rebuild each
    other's ops on every switch (torch keys a build on its sources and flags, not on the Python that built it)."""
    version = installed_torch_version(python, site_dirs) or "unknown"
    key = hashlib.sha256(f"{_interpreter_path(python)}\0{version}".encode()).hexdigest()[:16]
    return torch_extensions_root() / key


def _interpreter_path(python: str) -> str:
    """The interpreter's path with its folder's links resolved (a venv reached through a linked folder is the same
    venv, and shares its ops) but not the file's own (a venv's bin/python links to the system Python, which is
    another interpreter's too)."""
    path = os.path.abspath(python)
    return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))


def training_env(overrides: Mapping[str, str] | None = None, *, base: Mapping[str, str] | None = None,
                 helpers: Path | None = None, python: str | None = None,
                 site_dirs: Sequence[str] = (), preset_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The complete environment for the launcher: `base` (default os.environ, un-frozen) + `preset_env` (what the
    preset's runs need: it wins over what is inherited) + `overrides` (the user's own: they win over both), then:

    - PYTHONUNBUFFERED=1: every rank's prints reach the log within a second even if the script never flushes;
    - first on PYTHONPATH: a sitecustomize that makes stdout/stderr line-buffered (each line one write, so ranks
      sharing a pipe do not cut into each other's lines) and tags each rank's lines `[rankN]: `, then the
      pyhelpers folder (`import traindeck_report`);
    - TORCH_EXTENSIONS_DIR, unless the user set it, defaulted to the folder of the training interpreter `python`
      (torch_extensions_dir), so DeepSpeed's JIT-built ops are kept and no other interpreter rebuilds them.
    """
    env = unfrozen_environ(os.environ if base is None else base)
    env.update(preset_env or {})
    env.update(overrides or {})
    env["PYTHONUNBUFFERED"] = "1"
    ours = [str(line_buffering_dir()), str(helpers or pyhelpers_dir())]
    theirs = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ours]
    env["PYTHONPATH"] = os.pathsep.join([*ours, *theirs])
    if not env.get("TORCH_EXTENSIONS_DIR"):
        env["TORCH_EXTENSIONS_DIR"] = str(torch_extensions_dir(python or sys.executable, site_dirs))
    arm_flight_recorder(env, installed_torch_version(python or sys.executable, site_dirs))
    return env


FLIGHT_RECORDER_ENTRIES = "2000"


def arm_flight_recorder(env: dict[str, str], torch_version: str | None = None) -> None:
    """torch's flight recorder on (every collective of every process group kept in a ring buffer per rank, read by
    `traindeck stacks`), unless the environment says TRAINDECK_FLIGHT_RECORDER=0; the user's own values win.
    torch 2.6+ reads TORCH_FR_BUFFER_SIZE (gloo and NCCL) and warns in every rank's output where the old
    TORCH_NCCL_TRACE_BUFFER_SIZE is set, so that one is set only for an older torch (`torch_version`), which reads
    it alone (NCCL, default 0);
    TORCH_NCCL_DUMP_ON_TIMEOUT has NCCL's watchdog write the buffer when a collective times out (where: the site
    hook sets TORCH_FR_DUMP_TEMP_FILE into the run directory)."""
    if env.get("TRAINDECK_FLIGHT_RECORDER", "1") == "0":
        return
    size = env.get("TORCH_FR_BUFFER_SIZE") or env.get("TORCH_NCCL_TRACE_BUFFER_SIZE") or FLIGHT_RECORDER_ENTRIES
    env.setdefault("TORCH_FR_BUFFER_SIZE", size)
    if _older_than(torch_version, (2, 6)):
        env.setdefault("TORCH_NCCL_TRACE_BUFFER_SIZE", size)
    env.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")


def _older_than(version: str | None, floor: tuple[int, int]) -> bool:
    """Whether a torch version string ("2.5.1+cu121") is older than `floor`; an unknown one is not."""
    parts = (version or "").split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) < floor
    except (IndexError, ValueError):
        return False
