"""Lines of work: a run and the runs resumed from it (and from those), read from each run's lineage.json, so History
can show a resume chain as one line of work (parent -> resumed runs). A rerun starts a line of its own (it says
whose rerun it is)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from traindeck.backend.runs.control.resume import Lineage, load_lineage

SETTLE_S = 120.0  # a run younger than this may not have its lineage.json yet (written just after the launch)


@dataclass(frozen=True)
class ChainPlace:
    """Where a run sits in its line of work."""

    root: str  # the first run of the line
    depth: int  # 0 for the first run, 1 for a run resumed from it, ...
    size: int  # how many runs the line holds (1: a run alone)
    parent: str | None  # the run it was resumed from (or rerun of)
    how: str | None  # "resume" | "rerun" | None
    resumed_from: str | None  # the checkpoint's path


class LineageIndex:
    """lineage.json per run, read once (it never changes once written) and joined into lines of work."""

    def __init__(self) -> None:
        self._known: dict[str, Lineage | None] = {}

    def lineage(self, run_id: str, run_dir: str, created_at: float) -> Lineage | None:
        if run_id in self._known:
            return self._known[run_id]
        found = load_lineage(run_dir) if run_dir else None
        if found is not None or time.time() - created_at > SETTLE_S:
            self._known[run_id] = found
        return found

    def places(self, runs: Iterable[tuple[str, str, float]]) -> dict[str, ChainPlace]:
        """(run id, run dir, created at) of each run -> its place; a parent not among `runs` counts as absent."""
        runs = list(runs)
        lineages = {run_id: self.lineage(run_id, run_dir, created) for run_id, run_dir, created in runs}
        resumed_parent = {run_id: lin.parent for run_id, lin in lineages.items()
                          if lin is not None and lin.how == "resume" and lin.parent in lineages}
        roots: dict[str, tuple[str, int]] = {}
        for run_id in lineages:
            seen, node, depth = {run_id}, run_id, 0
            while node in resumed_parent:
                node = resumed_parent[node]
                if node in seen:  # a cycle cannot be written by traindeck; never loop on a hand-edited file
                    break
                seen.add(node)
                depth += 1
            roots[run_id] = (node, depth)
        sizes: dict[str, int] = {}
        for root, _depth in roots.values():
            sizes[root] = sizes.get(root, 0) + 1
        places = {}
        for run_id, (root, depth) in roots.items():
            lin = lineages[run_id]
            places[run_id] = ChainPlace(root, depth, sizes[root], lin.parent if lin else None,
                                        lin.how if lin else None, lin.resumed_from if lin else None)
        return places


def line_of_work(places: dict[str, ChainPlace], run_id: str, created: dict[str, float]) -> list[str]:
    """The runs of `run_id`'s line of work, oldest first (the chain parent -> resumed runs)."""
    place = places.get(run_id)
    if place is None:
        return [run_id]
    members = [r for r, p in places.items() if p.root == place.root]
    return sorted(members, key=lambda r: (places[r].depth, created.get(r, 0.0)))


def checkpoint_name(path: str | None) -> str:
    return Path(path).name if path else "?"
