"""`runs bundle`: one zip for a bug report: the run's logs, configs, command, diagnosis, provenance and resource
summary. Secrets are masked: the run directory never holds them (command.json and request.json are written
masked), and every text file is passed through the masking once more on its way in, with the values of the
secret-looking variables of this environment (a token set in the shell that launched the run) masked too.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_bytes

# Run-directory files that belong in a report (the run's checkpoints and data never do).
FILES = ("command.json", "request.json", "lineage.json", "output.log", "supervisor.log", "sidecar.log",
         "evidence.json", "provenance.json", "git.diff", "requirements.txt", "companion.json", "estimate.json",
         "accelerate_config.yaml", "ds_config.json")
MAX_FILE_BYTES = 64 << 20  # a larger log goes in as its last 64 MiB


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    from traindeck.backend.launch.environ import is_secret_name

    environ = os.environ if environ is None else environ
    return sorted({v for k, v in environ.items() if is_secret_name(k) and len(v) >= 6}, key=len, reverse=True)


def _mask(data: bytes, secrets: list[str]) -> bytes:
    for value in secrets:
        data = data.replace(value.encode(), b"***")
    return data


def write_bundle(run_dir: Path | str, summary: dict[str, Any], target: Path | str,
                 environ: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    """Write the zip (atomically); returns (its size in bytes, the names inside)."""
    run_dir = Path(run_dir)
    secrets = secret_values(environ)
    names: list[str] = []
    import io

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in FILES:
            path = run_dir / name
            try:
                size = path.stat().st_size
                with open(path, "rb") as handle:
                    if size > MAX_FILE_BYTES:
                        handle.seek(size - MAX_FILE_BYTES)
                    data = handle.read()
            except OSError:
                continue
            archive.writestr(f"{run_dir.name}/{name}", _mask(data, secrets))
            names.append(name)
        text = json.dumps(summary, indent=2, default=str).encode()
        archive.writestr(f"{run_dir.name}/summary.json", _mask(text, secrets))
        names.append("summary.json")
    payload = buffer.getvalue()
    atomic_write_bytes(Path(target), payload)
    return len(payload), names
