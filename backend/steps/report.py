"""`traindeck steps`: the per-rank table of a typical step's phase times and shares, the verdict and the advice, as text."""

from __future__ import annotations

from traindeck.backend.core import format_bytes
from traindeck.backend.steps.anatomy import StepAnatomy
from traindeck.backend.steps.memory import memory_line, rank_memory_of
from traindeck.backend.steps.records import PHASES

_MiB = 1 << 20


def anatomy_table(anatomy: StepAnatomy, rank: int | None = None) -> str:
    """The table (one row per rank, `rank` alone if given), then the verdict, the slow-down and the advice."""
    if not anatomy.ranks:
        return "".join(line + "\n" for line in (anatomy.summary, *("- " + a for a in anatomy.advice)))
    header = ["rank", *(["node"] if anatomy.hosts else []), "steps", *PHASES, "step", "GPU peak", "host peak"]
    rows = [header]
    for r, a in sorted(anatomy.ranks.items()):
        if rank is not None and r != rank:
            continue
        mark = "*" if r == anatomy.straggler else ""
        total = sum(a.phases_ms.values()) or 1.0
        cells = [f"{r}{mark}", *([anatomy.hosts.get(r, "")] if anatomy.hosts else []), str(a.steps)]
        cells += [f"{a.phases_ms[p]:.1f} ms {a.phases_ms[p] / total:4.0%}" for p in PHASES]
        cells += [f"{a.step_ms:.1f} ms", format_bytes(a.peak_gpu_allocated, digits=2), format_bytes(a.peak_host, digits=2)]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(widths[i]) for i, cell in enumerate(row)) for row in rows]
    lines.append("a typical step: each phase's mean over the middle half of the steps by time (after the first "
                 "steps), adding up to the step, and its share"
                 + ("; * the slowest rank, which the others wait for"
                    if anatomy.straggler is not None and rank in (None, anatomy.straggler) else ""))
    for r, a in sorted(anatomy.ranks.items()):
        if rank is None or r == rank:
            lines.append("memory: " + memory_line(rank_memory_of(a)))
    lines.append("")
    lines.append(anatomy.summary)
    if anatomy.slowdown is not None:
        lines.append(anatomy.slowdown.text())
    for note in anatomy.notes:
        lines.append("note: " + note)
    for advice in anatomy.advice:
        lines.append("- " + advice)
    return "\n".join(lines) + "\n"
