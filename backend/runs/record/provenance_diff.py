"""Two runs' provenance side by side (History's compare): which code (git commit, branch, uncommitted changes), which
versions (Python, torch, CUDA, DeepSpeed, ...), and which packages differ in their `pip freeze`, and how."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindeck.backend.runs.record.provenance import PACKAGES
from traindeck.backend.runs.record.provenance import load as load_provenance

MAX_FREEZE_BYTES = 4 << 20  # a freeze is a few KiB; a huge file is not one
VERSION_KEYS = ("python", "torch", "cuda", "nccl", "deepspeed", "accelerate", "transformers", "numpy")
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class PackageDifference:
    name: str
    a: str | None  # None: not installed in A's interpreter
    b: str | None
    how: str  # "only in A", "only in B", "upgraded", "downgraded", "changed"


@dataclass
class ProvenanceComparison:
    rows: list[tuple[str, str, str]] = field(default_factory=list)  # (what, A, B) for code, versions and host
    packages: list[PackageDifference] = field(default_factory=list)
    same_packages: int = 0
    problems: list[str] = field(default_factory=list)  # what could not be compared, one line each


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503: Foo_Bar and foo-bar are one package


def parse_freeze(text: str) -> dict[str, str]:
    """`pip freeze` lines as {name: version}: `name==1.2`, `name @ URL` (the URL stands for the version),
    `-e git+URL#egg=name`; comments and options are skipped."""
    packages: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-e "):
            egg = re.search(r"[#&]egg=([A-Za-z0-9._-]+)", line)
            if egg:
                packages[normalise(egg.group(1))] = line[3:].strip()
            continue
        if line.startswith("-"):
            continue
        if "==" in line:
            name, _, version = line.partition("==")
            packages[normalise(name.strip())] = version.strip()
        elif " @ " in line:
            name, _, url = line.partition(" @ ")
            packages[normalise(name.strip())] = url.strip()
        else:
            match = _NAME.match(line)
            if match:
                packages[normalise(match.group(1))] = ""
    return packages


def read_packages(run_dir: Path | str) -> tuple[dict[str, str] | None, str | None]:
    """The run's frozen packages, or None and why not."""
    path = Path(run_dir) / PACKAGES
    try:
        if path.stat().st_size > MAX_FREEZE_BYTES:
            return None, f"{path}: larger than {MAX_FREEZE_BYTES >> 20} MiB, not read"
        return parse_freeze(path.read_text(encoding="utf-8", errors="replace")), None
    except FileNotFoundError:
        return None, f"{path.parent.name}: no {PACKAGES} (provenance not captured, or still being captured)"
    except OSError as exc:
        return None, f"{path}: cannot be read: {exc.strerror or exc}"


def _direction(a: str, b: str) -> str:
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:  # pragma: no cover - pip brings packaging
        return "changed"
    try:
        return "upgraded" if Version(b) > Version(a) else "downgraded" if Version(b) < Version(a) else "changed"
    except InvalidVersion:
        return "changed"


def package_differences(a: dict[str, str], b: dict[str, str]) -> tuple[list[PackageDifference], int]:
    """The packages whose version differs (or that only one side has), by name; and how many are the same."""
    differences: list[PackageDifference] = []
    same = 0
    for name in sorted(set(a) | set(b)):
        va, vb = a.get(name), b.get(name)
        if va == vb:
            same += 1
        elif va is None:
            differences.append(PackageDifference(name, None, vb, "only in B"))
        elif vb is None:
            differences.append(PackageDifference(name, va, None, "only in A"))
        else:
            differences.append(PackageDifference(name, va, vb, _direction(va, vb)))
    return differences, same


def _git_text(git: dict[str, Any] | None) -> tuple[str, str, str]:
    if not git:
        return "not in a git repository", "-", "-"
    dirty = "yes (uncommitted changes, kept as git.diff)" if git.get("dirty") else "no"
    return str(git.get("commit") or "-"), str(git.get("branch") or "-"), dirty


def compare_provenance(run_dir_a: Path | str, run_dir_b: Path | str) -> ProvenanceComparison:
    """Read both runs' provenance (call it off the UI thread)."""
    result = ProvenanceComparison()
    provenance = [load_provenance(run_dir_a), load_provenance(run_dir_b)]
    for label, data, run_dir in zip(("A", "B"), provenance, (run_dir_a, run_dir_b), strict=True):
        if data is None:
            result.problems.append(f"{label}: no provenance recorded ({Path(run_dir).name})")
    pa, pb = (p or {} for p in provenance)
    if provenance[0] is not None or provenance[1] is not None:
        ga, gb = _git_text(pa.get("git")), _git_text(pb.get("git"))
        result.rows += [("git commit", ga[0], gb[0]), ("git branch", ga[1], gb[1]),
                        ("uncommitted changes", ga[2], gb[2])]
        va, vb = pa.get("versions") or {}, pb.get("versions") or {}
        result.rows += [(key, str(va.get(key) or "-"), str(vb.get(key) or "-")) for key in VERSION_KEYS
                        if va.get(key) or vb.get(key)]
        ha, hb = pa.get("host") or {}, pb.get("host") or {}
        result.rows.append(("host", str(ha.get("hostname") or "-"), str(hb.get("hostname") or "-")))
        result.rows.append(("GPUs", ", ".join(str(g.get("name")) for g in ha.get("gpus") or []) or "none",
                            ", ".join(str(g.get("name")) for g in hb.get("gpus") or []) or "none"))
    (packages_a, why_a), (packages_b, why_b) = read_packages(run_dir_a), read_packages(run_dir_b)
    for label, why in (("A", why_a), ("B", why_b)):
        if why:
            result.problems.append(f"{label}: {why}")
    if packages_a is not None and packages_b is not None:
        result.packages, result.same_packages = package_differences(packages_a, packages_b)
    return result
