"""What the training interpreter has: Python, torch + CUDA, accelerate, deepspeed, transformers.

The interpreter is asked in a subprocess (torch is never imported here), and the answer is cached per interpreter so
the GUI can show it at once next time; installing or removing a package invalidates the cache entry.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text
from traindeck.backend.core.paths import cache_dir
from traindeck.backend.launch.environ import python_problem, unfrozen_environ

MARKER = "TRAINDECK_PROBE "
CACHE_VERSION = 1
PACKAGES = ("torch", "accelerate", "deepspeed", "transformers")

# Runs inside the training interpreter: stdlib only, and old-Python syntax so a too-old interpreter still answers.
PROBE_SCRIPT = r"""
import json, os, sys
out = {"python_version": "%d.%d.%d" % tuple(sys.version_info[:3]), "executable": sys.executable}
try:
    from importlib import metadata as _md
except ImportError:
    _md = None
for name in ("torch", "accelerate", "deepspeed", "transformers"):
    try:
        out[name] = _md.version(name) if _md else None
    except Exception:
        out[name] = None
try:
    import torch
    out["torch"] = out["torch"] or getattr(torch, "__version__", None)
    out["torch_cuda"] = getattr(torch.version, "cuda", None)
    available = bool(torch.cuda.is_available())
    out["cuda_available"] = available
    out["device_count"] = int(torch.cuda.device_count()) if available else 0
    out["device_names"] = [torch.cuda.get_device_name(i) for i in range(out["device_count"])]
except BaseException as exc:
    out["torch_error"] = "%s: %s" % (type(exc).__name__, exc)
dirs = set()
try:
    import sysconfig
    paths = sysconfig.get_paths()
    dirs.update([paths["purelib"], paths["platlib"]])
    import site
    dirs.add(site.getusersitepackages())
except Exception:
    pass
out["site_dirs"] = sorted(d for d in dirs if d and os.path.isdir(d))
sys.stdout.write("\n" + "TRAINDECK_PROBE " + json.dumps(out) + "\n")
sys.stdout.flush()
"""


@dataclass(frozen=True)
class TrainingEnvironment:
    """One interpreter's answer. Versions are None when the package is not installed; `error` is set when the
    interpreter could not be asked at all (then nothing else is known)."""

    python: str
    error: str | None = None
    executable: str | None = None
    python_version: str | None = None
    torch: str | None = None
    torch_error: str | None = None  # set when torch is missing or fails to import
    torch_cuda: str | None = None  # the CUDA version torch was built with; None for CPU builds
    cuda_available: bool | None = None
    device_count: int | None = None
    device_names: tuple[str, ...] = ()
    accelerate: str | None = None
    deepspeed: str | None = None
    transformers: str | None = None
    site_dirs: tuple[str, ...] = ()
    probed_at: float = 0.0
    from_cache: bool = False
    # Modification times (ns) of the interpreter and its site-packages folders when probed: the cache key.
    stamps: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line for a status bar: 'Python 3.11.7 · torch 2.13.0 (CPU only) · accelerate 1.15.0 · ...'."""
        if self.error:
            return self.error
        parts = [f"Python {self.python_version}"]
        if self.torch is None:
            parts.append("no torch")
        elif self.torch_error:
            parts.append(f"torch {self.torch} (does not import)")
        elif self.cuda_available:
            parts.append(f"torch {self.torch} (CUDA {self.torch_cuda}, {self.device_count} GPU)")
        else:
            parts.append(f"torch {self.torch} (CPU only)")
        for name in ("accelerate", "deepspeed", "transformers"):
            version = getattr(self, name)
            parts.append(f"{name} {version}" if version else f"no {name}")
        return " · ".join(parts)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["device_names"] = list(self.device_names)
        data["site_dirs"] = list(self.site_dirs)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TrainingEnvironment:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["device_names"] = tuple(values.get("device_names") or ())
        values["site_dirs"] = tuple(values.get("site_dirs") or ())
        return cls(**values)


def problems_for(env: TrainingEnvironment, launcher: str, *, needs_deepspeed: bool = False) -> list[str]:
    """What stops `launcher` from running in `env`, one plain sentence each with the fix; [] when nothing does.

    `needs_deepspeed`: the run uses a DeepSpeed config even though the launcher is not deepspeed (accelerate
    with a DeepSpeed section, or a script that takes --deepspeed_config).
    """
    if env.error:
        return [env.error]
    py = env.python
    problems: list[str] = []
    if env.torch is None:
        problems.append(f"torch is not installed for {py} (pip install torch)")
    elif env.torch_error:
        problems.append(f"torch {env.torch} is installed for {py} but fails to import: {env.torch_error}")
    if launcher == "accelerate" and env.accelerate is None:
        problems.append(f"accelerate is not installed for {py} (pip install accelerate)")
    if (launcher == "deepspeed" or needs_deepspeed) and env.deepspeed is None:
        problems.append(f"deepspeed is not installed for {py} (pip install deepspeed)")
    return problems


def probe_environment(python: str, timeout: float = 60, *, use_cache: bool = True,
                      env: Mapping[str, str] | None = None) -> TrainingEnvironment:
    """Ask `python` what it has (cached while neither the interpreter nor its site-packages change).

    Never raises for a bad interpreter: a missing or non-executable file, a crash or a timeout come back as
    `error`. `env` is the environment to ask in (default: ours, as it was before a frozen app's bootloader);
    CUDA_VISIBLE_DEVICES in it changes the device count, so it is part of the cache key.
    """
    if os.sep not in python:  # a bare name such as "python3": the one on PATH
        python = shutil.which(python) or python
    problem = python_problem(python)
    if problem:
        return TrainingEnvironment(python=python, error=problem, probed_at=time.time())
    run_env = dict(env) if env is not None else unfrozen_environ(os.environ)
    if use_cache:
        cached = cached_environment(python, env=run_env)
        if cached is not None:
            return cached
    result = _run_probe(python, timeout, run_env)
    if result.error is None:
        _store(result, run_env)
    return result


def cached_environment(python: str, *, env: Mapping[str, str] | None = None, max_age: float = 7 * 86400
                       ) -> TrainingEnvironment | None:
    """The last probe of `python` if it is still true (nothing installed or removed since), else None. Cheap:
    a few stat calls, no process."""
    run_env = dict(env) if env is not None else unfrozen_environ(os.environ)
    path = _cache_file(python, run_env)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("cache_version") != CACHE_VERSION:
        return None
    try:
        found = TrainingEnvironment.from_json(data["environment"])
    except (KeyError, TypeError):
        return None
    if time.time() - found.probed_at > max_age or _stamps(python, found.site_dirs) != found.stamps:
        return None
    return dataclasses.replace(found, from_cache=True)


def _run_probe(python: str, timeout: float, env: dict[str, str]) -> TrainingEnvironment:
    started = time.time()
    try:
        # Own session: a hung probe is killed with everything it started, so no child keeps our pipes open.
        proc = subprocess.Popen([python, "-c", PROBE_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace", env=env,
                                cwd=tempfile.gettempdir(), start_new_session=True)
    except OSError as exc:
        return TrainingEnvironment(python=python, probed_at=started,
                                   error=f"cannot run {python}: {exc.strerror or exc}")
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return TrainingEnvironment(python=python, probed_at=started,
                                   error=f"{python} did not answer within {timeout:g} s (importing torch hung?)")
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    answer = None
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARKER):
            try:
                answer = json.loads(line[len(MARKER):])
            except ValueError:
                pass
            break
    if not isinstance(answer, dict):
        how = f"signal {-done.returncode}" if done.returncode < 0 else f"exit code {done.returncode}"
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        return TrainingEnvironment(python=python, probed_at=started,
                                   error=f"{python} is not a working Python interpreter ({how}): {tail}".rstrip(": "))
    answer.update(python=python, probed_at=started)
    found = TrainingEnvironment.from_json(answer)
    return dataclasses.replace(found, stamps=_stamps(python, found.site_dirs))


def _stamps(python: str, site_dirs: tuple[str, ...]) -> dict[str, int]:
    # The interpreter (symlink and target: a venv's python is a symlink) and every site-packages folder: pip
    # adds or removes entries there on every install, which changes the folder's mtime.
    stamps: dict[str, int] = {}
    for label, path, follow in (("python", python, True), ("python-link", python, False)):
        try:
            stamps[label] = os.stat(path, follow_symlinks=follow).st_mtime_ns
        except OSError:
            stamps[label] = -1
    for folder in site_dirs:
        try:
            stamps[folder] = os.stat(folder).st_mtime_ns
        except OSError:
            stamps[folder] = -1
    return stamps


def _cache_file(python: str, env: Mapping[str, str]) -> Path:
    key = f"{os.path.abspath(python)}\0{env.get('CUDA_VISIBLE_DEVICES', '<unset>')}"
    return cache_dir() / "probes" / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


def _store(found: TrainingEnvironment, env: Mapping[str, str]) -> None:
    payload = {"cache_version": CACHE_VERSION, "environment": found.to_json()}
    try:
        atomic_write_text(_cache_file(found.python, env), json.dumps(payload, indent=1))
    except OSError:  # a read-only cache folder only costs the next probe its speed
        pass
