"""Rebuild the config corpus from its manifest: each file byte-exact from its public repository at its commit.

    .venv/bin/python tests/corpus/fetch_corpus.py OUT [--manifest tests/corpus/manifest.tsv]
                                                     [--mirrors DIR] [--cache DIR]

The files are other people's work and never enter this repository; the manifest (relpath, repo, path, commit,
kind, sha256) is ours. A repository is read from DIR/<owner>+<name>/repo when --mirrors has it (a git directory),
else cloned once (bare, blobs on demand) from https://github.com/<owner>/<name> into the cache. Every file is
checked against its sha256; a mismatch or a missing commit is reported and the file left out (exit 1).
Then run tests/corpus/judge.py OUT only if the tools changed; verdicts.tsv is made for exactly these bytes.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _git_dir(repo: str, mirrors: Path | None, cache: Path) -> Path:
    name = repo.replace("/", "+")
    if mirrors is not None and (mirrors / name / "repo").is_dir():
        return mirrors / name / "repo"
    target = cache / f"{name}.git"
    if not target.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "--quiet", "--bare", "--filter=blob:none",
                        f"https://github.com/{repo}.git", str(target)], check=True)
    return target


def _show(git_dir: Path, commit: str, path: str) -> bytes | None:
    done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
    if done.returncode != 0:  # a commit a shallow or stale clone lacks: ask for it once
        subprocess.run(["git", "--git-dir", str(git_dir), "fetch", "--quiet", "origin", commit], capture_output=True)
        done = subprocess.run(["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], capture_output=True)
    return done.stdout if done.returncode == 0 else None


def fetch(manifest: Path, out: Path, mirrors: Path | None, cache: Path) -> list[str]:
    """Write every file of the manifest under `out` (and the manifest beside them); the problems, one a line."""
    with open(manifest, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    problems = []
    dirs: dict[str, Path | str] = {}  # repo -> its git directory, or why it cannot be read (asked once)
    for r in rows:
        if r["repo"] not in dirs:
            try:
                dirs[r["repo"]] = _git_dir(r["repo"], mirrors, cache)
            except (subprocess.CalledProcessError, OSError) as exc:
                dirs[r["repo"]] = str(exc)
        git_dir = dirs[r["repo"]]
        if isinstance(git_dir, str):
            problems.append(f"{r['relpath']}: cannot read {r['repo']}: {git_dir}")
            continue
        data = _show(git_dir, r["commit"], r["path"])
        if data is None:
            problems.append(f"{r['relpath']}: {r['repo']} has no {r['path']} at {r['commit']}")
            continue
        if hashlib.sha256(data).hexdigest() != r["sha256"]:
            problems.append(f"{r['relpath']}: {r['repo']} {r['path']}@{r['commit'][:10]} is not the recorded bytes")
            continue
        target = out / r["relpath"]
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, target)
    shutil.copyfile(manifest, out / "manifest.tsv")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", type=Path)
    p.add_argument("--manifest", type=Path, default=HERE / "manifest.tsv")
    p.add_argument("--mirrors", type=Path, help="a folder of <owner>+<name>/repo git directories to read first")
    p.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "traindeck-corpus",
                   help="where repositories are cloned (default: %(default)s)")
    args = p.parse_args(argv)
    problems = fetch(args.manifest, args.out, args.mirrors, args.cache)
    for line in problems:
        print(f"fetch_corpus: {line}", file=sys.stderr)
    print(f"fetch_corpus: {args.out}: {'with ' + str(len(problems)) + ' problems' if problems else 'complete'}",
          file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
