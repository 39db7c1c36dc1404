"""The diary of a run's own helper processes (supervisor.log, sidecar.log): their stderr, one "HH:MM:SS message"
line a record."""

from __future__ import annotations

import logging
import sys


def log_to_stderr(logger: logging.Logger) -> None:
    """Send `logger`'s records (INFO and up) to stderr as "HH:MM:SS message", and only there."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
