"""The diary of a run's own helper processes (supervisor.log, sidecar.log): their stderr, one "HH:MM:SS message"
line a record, with secrets masked (masking.mask_text: an exception's text may quote a token)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from traindeck.backend.core.masking import mask_text


class _MaskingFormatter(logging.Formatter):
    """"HH:MM:SS message", traceback included, masked."""

    def __init__(self, secret_values: Sequence[str]) -> None:
        super().__init__("%(asctime)s %(message)s", datefmt="%H:%M:%S")
        self.secret_values = list(secret_values)

    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record), self.secret_values)


def log_to_stderr(logger: logging.Logger, secret_values: Sequence[str] = ()) -> None:
    """Send `logger`'s records (INFO and up) to stderr as "HH:MM:SS message", and only there; `secret_values`
    (the run's secret variables) are masked in them, beside what mask_text finds by shape."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_MaskingFormatter(secret_values))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
