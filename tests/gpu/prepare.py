"""`make gpu-check`, on this machine: gathers into .gpu/ (ignored by git) what a GPU machine lacks for the GPU
acceptance check, and checks that what travels to it fits the device tool's 64 MiB.

The GPU machines have CUDA torch, accelerate, transformers, nvidia-ml-py, psutil and PyYAML, Python 3.12 and no
network; tests/gpu/wheels.txt pins the rest (DeepSpeed without prebuilt ops, pydantic and its parts, hjson,
typing_extensions new enough for that pydantic). Each pinned wheel is taken from .gpu/wheels if already there, else
copied from --kit (a folder of wheels, such as the shared GPU kit's), else downloaded for CPython 3.12 on x86-64
Linux; DeepSpeed, published as source only, is built here into a wheel without ops (DS_BUILD_OPS=0: the GPU machine
JIT-builds the one op the check needs). Wheels that are not pinned are removed: two versions of one package stop
the whole install there.

What travels: the tracked files and the untracked files git does not ignore (the device tool's copy of the working
tree), plus the carried .gpu. Also writes .gpu/source.txt (the commit), which the table's header quotes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PINS = HERE / "wheels.txt"
LIMIT = 64 * 2**20  # the device tool's limit on what travels: working tree and carried paths together
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# Wheel tags a CPython 3.12 on x86-64 Linux can install.
_PYTHON_TAGS = re.compile(r"^(py3|py2\.py3|cp312|cp3\d*-abi3)$")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(path: Path = PINS) -> list[tuple[str, str]]:
    """`name==version` lines (comments and blank lines skipped) as (normalized name, version)."""
    pins = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip():
            raise ValueError(f"{path}: not name==version: {line!r}")
        pins.append((normalize(name.strip()), version.strip()))
    return pins


def wheel_key(filename: str) -> tuple[str, str] | None:
    """(normalized name, version) of a wheel file name; None for anything else."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) < 5:
        return None
    return normalize(parts[0]), parts[1]


def fits_gpu_machine(filename: str) -> bool:
    """Whether a wheel installs on CPython 3.12, x86-64 Linux (pure Python, cp312, abi3; manylinux x86_64 or any)."""
    parts = filename[:-4].split("-")
    python, platform = parts[-3], parts[-1]
    pythons_ok = any(_PYTHON_TAGS.match(tag) for tag in python.split("."))
    platforms_ok = platform == "any" or all("x86_64" in p and "linux" in p for p in platform.split("."))
    return pythons_ok and platforms_ok


def wheels_in(folder: Path | None) -> dict[tuple[str, str], Path]:
    if folder is None or not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.glob("*.whl")):
        key = wheel_key(path.name)
        if key is not None and fits_gpu_machine(path.name):
            found[key] = path
    return found


def gather(pins: Iterable[tuple[str, str]], dest: Path, kit: Path | None,
           fetch: Callable[[str, str, Path], bool] | None) -> tuple[list[str], list[str]]:
    """Puts one wheel per pin into `dest`: kept, copied from `kit`, or fetched (fetch(name, version, dest) -> ok).
    Returns (what was done, one line per pin; the pins still missing). Unpinned wheels in `dest` are removed."""
    dest.mkdir(parents=True, exist_ok=True)
    pins = list(pins)
    wanted = set(pins)
    done, missing = [], []
    for path in dest.glob("*.whl"):
        if wheel_key(path.name) not in wanted or not fits_gpu_machine(path.name):
            path.unlink()
            done.append(f"removed {path.name} (not pinned in {PINS.name})")
    have = wheels_in(dest)
    from_kit = wheels_in(kit)
    for key in pins:
        name, version = key
        if key in have:
            done.append(f"kept    {have[key].name}")
        elif key in from_kit:
            shutil.copyfile(from_kit[key], dest / from_kit[key].name)  # not its mode: kits may be read-only
            done.append(f"copied  {from_kit[key].name} (from {kit})")
        elif fetch is not None and fetch(name, version, dest) and key in wheels_in(dest):
            done.append(f"fetched {wheels_in(dest)[key].name}")
        else:
            missing.append(f"{name}=={version}")
    return done, missing


def fetch_wheel(name: str, version: str, dest: Path, python: str = sys.executable) -> bool:
    """pip download of a CPython 3.12 x86-64 Linux wheel; failing that (DeepSpeed publishes source only), the
    source built here into a wheel, DeepSpeed without ops."""
    spec = f"{name}=={version}"
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    download = [python, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
                "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(dest), spec]
    if subprocess.run(download, check=False).returncode == 0:
        return True
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DS_BUILD_OPS": "0"}
        build = [python, "-m", "pip", "wheel", "-q", "--disable-pip-version-check", "--no-deps", "--no-binary", name,
                 "-w", tmp, spec]
        if subprocess.run(build, env=env, check=False).returncode != 0:
            return False
        built = [p for p in Path(tmp).glob("*.whl") if fits_gpu_machine(p.name)]
        for path in built:
            shutil.copyfile(path, dest / path.name)
        return bool(built)


def travelling_files(repo: Path, carried: Iterable[str]) -> list[Path]:
    """What the device tool copies: tracked files and untracked ones git does not ignore, plus the carried paths."""
    listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, check=True).stdout
    files = {repo / name for name in listed.decode("utf-8", "surrogateescape").split("\0") if name}
    for path in carried:
        root = repo / path
        if root.is_file() or root.is_symlink():
            files.add(root)
        elif root.is_dir():
            files.update(p for p in root.rglob("*") if p.is_file() or p.is_symlink())
    return sorted(p for p in files if p.is_symlink() or p.is_file())


def travelling_bytes(files: Iterable[Path]) -> int:
    return sum(p.lstat().st_size for p in files)


def source_line(repo: Path) -> str:
    """The commit the tree is, for the table's header: 'commit <sha> (<branch>)', and whether it had changes."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    sha, branch = git("rev-parse", "HEAD") or "unknown", git("rev-parse", "--abbrev-ref", "HEAD") or "?"
    changed = git("status", "--porcelain", "--untracked-files=no")
    return f"commit {sha} ({branch})" + (f", with {len(changed.splitlines())} uncommitted change(s)" if changed else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kit", default="", help="a folder of wheels to copy from first (the shared GPU kit's wheels/)")
    p.add_argument("--dest", default=".gpu", help="the carried folder, relative to the repository root")
    p.add_argument("--no-fetch", action="store_true", help="never download or build a missing wheel")
    args = p.parse_args(argv)
    dest = REPO / args.dest
    kit = Path(args.kit).expanduser() if args.kit else None
    if kit is not None and not kit.is_dir():
        print(f"gpu-check: no kit at {kit}: the wheels are downloaded instead")
        kit = None
    done, missing = gather(read_pins(), dest / "wheels", kit, None if args.no_fetch else fetch_wheel)
    for line in done:
        print(f"  {line}")
    if missing:
        print(f"gpu-check: missing wheels: {', '.join(missing)} (not in the kit, and not downloadable here)")
        return 1
    (dest / "source.txt").write_text(source_line(REPO) + "\n", encoding="utf-8")
    files = travelling_files(REPO, [args.dest])
    total = travelling_bytes(files)
    carried = travelling_bytes(f for f in files if dest in f.parents)
    print(f"gpu-check: what travels: {total / 2**20:.1f} MiB of the {LIMIT // 2**20} MiB allowed "
          f"({len(files)} files: the working tree {(total - carried) / 2**20:.1f} MiB, {args.dest}/ "
          f"{carried / 2**20:.1f} MiB)")
    if total >= LIMIT:
        print("gpu-check: too much travels: ignore or remove large untracked files, or carry less")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
