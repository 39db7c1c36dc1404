"""Reading and writing the quantities people type: parameter counts ("1.5B", "350M", "7e9") and memory sizes."""

from __future__ import annotations

import math
import re

GIB = 1024**3
MIB = 1024**2

_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
_COUNT_RE = re.compile(r"^\s*([0-9][0-9_,]*(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\.[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmbgt]?)\s*$", re.I)

_SIZE_SUFFIX = {
    "": GIB,  # a bare number is GiB, as the options say
    "g": GIB,
    "gib": GIB,
    "gb": 10**9,
    "m": MIB,
    "mib": MIB,
    "mb": 10**6,
    "t": 1024**4,
    "tib": 1024**4,
    "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*)\s*$", re.I)


class QuantityError(ValueError):
    """Text that cannot be read as the quantity asked for; the message is one line meant for the user."""


def parse_count(value: str | int | float, what: str = "parameter count") -> int:
    """"1.5B" -> 1_500_000_000, "350M", "125k", "7e9", 1.5e9, "1,500,000" -> an int > 0; anything else raises.

    Suffixes are decimal (K = 1e3, M = 1e6, B or G = 1e9, T = 1e12), as model names use them.
    """
    if isinstance(value, bool):
        raise QuantityError(f"{what}: expected a number, got {value!r}")
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _COUNT_RE.match(str(value))
        if not match:
            raise QuantityError(
                f"{what}: cannot read {str(value)!r}; write it like 1.5B, 350M, 125K, 7e9 or 1500000000"
            )
        digits, suffix = match.groups()
        number = float(digits.replace(",", "").replace("_", "")) * _COUNT_SUFFIX[suffix.lower()]
    if not math.isfinite(number) or number < 1:
        raise QuantityError(f"{what}: must be at least 1, got {value!r}")
    return int(round(number))


def parse_size(value: str | int | float, what: str = "memory size") -> int:
    """A memory size in bytes: a bare number is GiB ("80" -> 80 GiB); "24GiB", "24G", "500MiB", "80GB" (10^9) also read."""
    if isinstance(value, bool):
        raise QuantityError(f"{what}: expected a size, got {value!r}")
    if isinstance(value, int | float):
        number, unit = float(value), GIB
    else:
        match = _SIZE_RE.match(str(value))
        if not match or match.group(2).lower() not in _SIZE_SUFFIX:
            raise QuantityError(f"{what}: cannot read {str(value)!r}; write GiB as a number (80) or with a unit (24GiB, 500MiB)")
        number, unit = float(match.group(1)), _SIZE_SUFFIX[match.group(2).lower()]
    if not math.isfinite(number) or number <= 0:
        raise QuantityError(f"{what}: must be more than 0, got {value!r}")
    return int(number * unit)


def format_count(n: int | float) -> str:
    """1_500_000_000 -> "1.50B", 124_439_808 -> "124.4M"."""
    n = float(n)
    for limit, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= limit:
            value = n / limit
            return f"{value:.2f}{suffix}" if value < 100 else f"{value:.1f}{suffix}"
    return f"{int(n)}"


def format_gib(n: int | float | None, digits: int = 1) -> str:
    """Bytes as GiB with one decimal ("-" for unknown)."""
    if n is None:
        return "-"
    return f"{n / GIB:.{digits}f}"
