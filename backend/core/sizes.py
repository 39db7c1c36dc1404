"""Byte counts said as people read them: the one formatter every report, table and command line uses.

`format_bytes` words memory (a GPU's or a process's peak): GiB from 1 GiB up, whole MiB below, with a compact
"1.50G" / "390M" for narrow table columns. `format_size` words a size of any magnitude (a file, a checkpoint, a
machine's memory, a rate's bytes): whole bytes, then KiB, MiB, GiB and TiB to a tenth. Both say "-" for an unknown
(None) figure.
"""

from __future__ import annotations

__all__ = ["format_bytes", "format_size"]

MIB = 1 << 20
GIB = 1 << 30


def format_bytes(n: float | None, *, digits: int = 1, compact: bool = False) -> str:
    """Memory: "1.5 GiB" (`digits` decimals) from 1 GiB up, "512 MiB" below; `compact`: "1.50G", "390M"."""
    if n is None:
        return "-"
    if n >= GIB:
        return f"{n / GIB:.{digits}f}{'G' if compact else ' GiB'}"
    return f"{n / MIB:.0f}{'M' if compact else ' MiB'}"


def format_size(n: float | None) -> str:
    """Any size: "512 B", then "1.5 KiB", "3.2 MiB", "7.0 GiB", "1.2 TiB" (a tenth); the sign kept."""
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"
