"""Where a run came from, captured at launch into its run directory (W&B keeps the same: diff.patch,
requirements.txt, metadata):

    provenance.json     git {commit, branch, dirty, diff_file} or null, packages_file, versions, host, command
    git.diff            `git diff HEAD` of the script's repository (uncommitted changes; untracked files listed)
    requirements.txt    the training interpreter's installed packages in `pip freeze --all`'s format

Run by the sidecar process (never the supervisor loop, never the launching process): each step is time-limited and
a failing step leaves its field null with the reason, never the run.
"""

from __future__ import annotations

import json
import os
import platform
import re
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_text

PROVENANCE = "provenance.json"
DIFF = "git.diff"
PACKAGES = "requirements.txt"
GIT_TIMEOUT_S = 10.0
ASK_TIMEOUT_S = 60.0
MAX_DIFF_BYTES = 20 << 20

# Asked of the training interpreter in one go, without importing torch: package metadata, the CUDA version torch was
# built for (read from torch/version.py as text), the NCCL it ships with (the nvidia-nccl-cu* package pip wheels load)
# and every installed distribution as `pip freeze --all` writes it (PEP 610's direct_url.json for URL, VCS and
# editable installs). Importing torch here would cost ~4 s of CPU in the run's first seconds, and `pip freeze` (a
# second interpreter importing pip) another ~0.3 s: on a 2-core machine each shows on the job's own time under a
# flood of output (tests/perf/bench_run_output.py); this costs ~0.1 s (76 packages). Whether CUDA is usable is the
# launch probe's answer (recorded with the plan), not the record's.
_ASK_CODE = r"""
import ast, json, platform, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]  # `-c` puts the current folder first; the run's script sees its own folder, not ours
from importlib import metadata, util
out = {"python": platform.python_version(), "executable": sys.executable}
def key_of(name):
    return name.lower().replace("_", "-").replace(".", "-")
found = {}  # each METADATA parsed once (the email parser is most of this snippet's time)
for dist in metadata.distributions():  # in sys.path order: the first of a name is the one imported, as pip takes it
    meta = dist.metadata
    name = meta["Name"] if meta is not None else None
    if name and key_of(name) not in found:
        found[key_of(name)] = (name, meta["Version"], dist)
for name in ("torch", "deepspeed", "accelerate", "transformers", "tensorboard", "numpy"):
    out[name] = found[name][1] if name in found else None
out["cuda"] = None
try:
    spec = util.find_spec("torch")
    folder = list(spec.submodule_search_locations or []) if spec else []
    if folder:
        with open(folder[0] + "/version.py", encoding="utf-8") as handle:
            for node in ast.parse(handle.read()).body:
                target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
                if getattr(target, "id", None) == "cuda" and isinstance(getattr(node, "value", None), ast.Constant):
                    out["cuda"] = node.value.value
except Exception as exc:
    out["torch_error"] = str(exc)[:200]
nccl = sorted((name, version) for key, (name, version, _d) in found.items() if key.startswith("nvidia-nccl"))
out["nccl"] = nccl[0][1] if nccl else None
out["nccl_source"] = ("package " + nccl[0][0]) if nccl else None
def freeze_line(dist, name, version):
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "null")
    except Exception:
        direct = None
    url = direct.get("url") if isinstance(direct, dict) else None
    if not isinstance(url, str) or not url:
        return name + "==" + str(version)
    vcs = direct.get("vcs_info")
    if isinstance(vcs, dict) and vcs.get("vcs"):
        line = name + " @ " + vcs["vcs"] + "+" + url + ("@" + vcs["commit_id"] if vcs.get("commit_id") else "")
    else:
        line = name + " @ " + url
    if isinstance(direct.get("dir_info"), dict) and direct["dir_info"].get("editable"):
        path = url[len("file://"):] if url.startswith("file://") else url
        return "# Editable install (" + name + "==" + str(version) + ")\n-e " + path
    return line
out["packages"] = [freeze_line(dist, name, version) for _key, (name, version, dist) in sorted(found.items())]
print(json.dumps(out))
"""


def _run(argv: list[str], cwd: str | None, timeout: float) -> subprocess.CompletedProcess[bytes] | None:
    try:
        return subprocess.run(argv, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(script: str, cwd: str, run_dir: Path) -> dict[str, Any] | None:
    """The script's repository: commit, branch, dirty, and the uncommitted diff written to git.diff; None when the
    script is not in a git repository (or git is missing)."""
    folder = str(Path(cwd, script).resolve().parent)
    top = _run(["git", "-C", folder, "rev-parse", "--show-toplevel"], None, GIT_TIMEOUT_S)
    if top is None or top.returncode != 0:
        return None
    root = top.stdout.decode(errors="replace").strip()
    commit = _run(["git", "-C", root, "rev-parse", "HEAD"], None, GIT_TIMEOUT_S)
    branch = _run(["git", "-C", root, "rev-parse", "--abbrev-ref", "HEAD"], None, GIT_TIMEOUT_S)
    status = _run(["git", "-C", root, "status", "--porcelain", "--untracked-files=normal"], None, GIT_TIMEOUT_S)
    state: dict[str, Any] = {
        "root": root,
        "commit": commit.stdout.decode().strip() if commit is not None and commit.returncode == 0 else None,
        "branch": branch.stdout.decode().strip() if branch is not None and branch.returncode == 0 else None,
        "dirty": bool(status.stdout.strip()) if status is not None and status.returncode == 0 else None,
        "diff_file": None,
    }
    if state["dirty"]:
        diff = _run(["git", "-C", root, "diff", "HEAD", "--no-color", "--no-ext-diff"], None, GIT_TIMEOUT_S)
        text = diff.stdout[:MAX_DIFF_BYTES].decode(errors="replace") if diff is not None else ""
        untracked = [line[3:] for line in (status.stdout.decode(errors="replace").splitlines() if status else [])
                     if line.startswith("?? ")]
        if untracked:
            text += "".join(f"# untracked: {name}\n" for name in untracked)
        atomic_write_text(run_dir / DIFF, text)
        state["diff_file"] = str(run_dir / DIFF)
    return state


def ask_interpreter(python: str, timeout: float = ASK_TIMEOUT_S) -> dict[str, Any]:
    """Versions and installed packages of the training interpreter (one short subprocess, torch never imported);
    {"error": why} when it could not be asked."""
    result = _run([python, "-c", _ASK_CODE], None, timeout)
    data: dict[str, Any] = {}
    if result is not None and result.returncode == 0:
        try:
            data = json.loads(result.stdout.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            data = {}
    if not isinstance(data, dict) or not data:
        why = (result.stderr.decode(errors="replace").strip().splitlines() or [""])[-1] if result is not None else ""
        data = {"error": "the training interpreter could not be asked" + (f": {why}" if why else
                                                                           f" (no answer in {timeout:g} s)")}
    data["nvidia_driver"] = _driver_version()
    return data


def versions(python: str, timeout: float = ASK_TIMEOUT_S) -> dict[str, Any]:
    """The versions part of ask_interpreter (the package list left out)."""
    data = ask_interpreter(python, timeout)
    data.pop("packages", None)
    return data


_EDITABLE = re.compile(r"# Editable install \((?P<name>[^=]+)==(?P<version>[^)]*)\)\n-e (?P<path>.+)")


def with_git_editables(lines: list[str]) -> list[str]:
    """Editable installs that are git checkouts as `pip freeze` writes them: `-e git+REMOTE@COMMIT#egg=NAME` (the
    remote pip picks: origin, else the first; a local path as file://), or pip's note when there is no remote."""
    out = []
    for line in lines:
        match = _EDITABLE.fullmatch(line)
        folder = match["path"] if match else ""
        commit = _git_out(folder, "rev-parse", "HEAD") if folder and os.path.isdir(folder) else None
        if match is None or commit is None:
            out.append(line)
            continue
        remotes = (_git_out(folder, "config", "--get-regexp", r"remote\..*\.url") or "").splitlines()
        urls = dict(r.split(" ", 1) for r in remotes if " " in r)
        url = urls.get("remote.origin.url") or next(iter(urls.values()), None)
        if url is None:
            out.append(f"# Editable Git install with no remote ({match['name']}=={match['version']})\n-e {folder}")
            continue
        if "://" not in url:  # a local path, or scp-like user@host:path (pip writes both as URLs)
            scp = re.fullmatch(r"([^/@]+@)?([^/:]+):(?!/)(.+)", url)
            url = f"ssh://{scp[1] or ''}{scp[2]}/{scp[3]}" if scp else Path(url).resolve().as_uri()
        out.append(f"-e git+{url}@{commit}#egg={match['name'].replace('-', '_')}")
    return out


def _git_out(folder: str, *args: str) -> str | None:
    done = _run(["git", "-C", folder, *args], None, GIT_TIMEOUT_S)
    return done.stdout.decode(errors="replace").strip() if done is not None and done.returncode == 0 else None


def write_packages(packages: Any, run_dir: Path) -> tuple[str | None, str | None]:
    """requirements.txt from the interpreter's package lines: (its path, None) or (None, why not)."""
    if not isinstance(packages, list) or not all(isinstance(line, str) for line in packages):
        return None, "the training interpreter did not list its packages"
    packages = with_git_editables(packages)
    header = "# the training interpreter's packages at launch (as `pip freeze --all` writes them)\n"
    atomic_write_text(run_dir / PACKAGES, header + "".join(line + "\n" for line in packages))
    return str(run_dir / PACKAGES), None


def _driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for word in text.split():
        if word.count(".") in (1, 2) and word.replace(".", "").isdigit():
            return word
    return None


def host() -> dict[str, Any]:
    """This machine: hostname, OS, CPU count, RAM and each NVIDIA GPU (none where NVML cannot be read)."""
    import psutil

    gpus: list[dict[str, Any]] = []
    try:
        from traindeck.backend.monitor.nvml import NvmlLibrary

        library = NvmlLibrary()
        if library.open() is None:
            try:
                for index in range(library.device_count):
                    memory = library.memory(index)
                    gpus.append({"index": index, "name": library.name(index), "uuid": library.uuid(index),
                                 "memory_bytes": memory[1] if memory else None})
            finally:
                library.close()
    except Exception:  # noqa: BLE001 - no NVIDIA library is the common case on a laptop
        pass
    return {"hostname": socket.gethostname(), "os": platform.platform(), "cpus": os.cpu_count(),
            "ram_bytes": psutil.virtual_memory().total, "gpus": gpus}


def capture(run_dir: Path) -> dict[str, Any]:
    """Write provenance.json (and git.diff, requirements.txt) for the run in `run_dir`; returns what it wrote."""
    run_dir = Path(run_dir)
    command = json.loads((run_dir / "command.json").read_text(encoding="utf-8"))
    try:
        request = json.loads((run_dir / "request.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        request = {}
    python = str(command.get("python") or "python3")
    cwd = str(command.get("cwd") or ".")
    script = str(request.get("script") or _script_in(command.get("argv") or []))
    started = time.time()
    data: dict[str, Any] = {"captured_at": started, "command": {k: command.get(k) for k in
                                                                 ("argv", "command_line", "cwd", "launcher", "env")},
                            "config_files": sorted(p.name for p in run_dir.iterdir()
                                                   if p.suffix in (".json", ".yaml") and p.name.startswith(
                                                       ("ds_config", "accelerate_config")))}
    try:
        data["git"] = git_state(script, cwd, run_dir) if script else None
    except OSError as exc:
        data["git"] = None
        data["git_error"] = str(exc)
    asked = ask_interpreter(python)
    packages = asked.pop("packages", None)
    data["versions"] = asked
    data["host"] = host()
    data["packages_file"], why = write_packages(packages, run_dir)
    if why:
        data["packages_error"] = why
    data["took_s"] = round(time.time() - started, 2)
    atomic_write_text(run_dir / PROVENANCE, json.dumps(data, indent=2, sort_keys=True) + "\n")
    return data


def _script_in(argv: list[str]) -> str:
    return next((a for a in argv[1:] if a.endswith(".py")), "")


def load(run_dir: Path | str) -> dict[str, Any] | None:
    """What `runs show` prints as `provenance`; None while it is being captured (or for older runs)."""
    try:
        data = json.loads((Path(run_dir) / PROVENANCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    git = data.get("git")
    return {"git": {k: git.get(k) for k in ("commit", "branch", "dirty", "diff_file")} if isinstance(git, dict)
            else None,
            "packages_file": data.get("packages_file"), "versions": data.get("versions") or {},
            "host": data.get("host") or {}, "captured_at": data.get("captured_at"), "took_s": data.get("took_s")}
