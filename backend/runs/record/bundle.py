"""`runs bundle`: one zip for a bug report: the run's logs, configs, command, diagnosis, provenance and resource
summary. Secrets are masked: the run directory's own records never hold them (command.json and request.json are
written masked, the diagnosis and evidence.json are masked by the supervisor), and every file is passed through
the masking of free text (masking.TextMasker: credential shapes, JSON Web Tokens, Authorization / Bearer
credentials, secret-named key=value pairs, URL passwords) on its way in, with the values of the secret-looking
variables of this environment (a token set in the shell that launched the run) masked too. The run's output.log
on disk stays the script's own bytes: only the copy in the zip is masked.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from traindeck.backend.core.fileio import atomic_write_bytes
from traindeck.backend.core.masking import TextMasker
from traindeck.backend.core.masking import secret_values as env_secret_values

# Run-directory files that belong in a report (the run's checkpoints and data never do).
FILES = ("command.json", "request.json", "lineage.json", "output.log", "supervisor.log", "sidecar.log",
         "evidence.json", "provenance.json", "git.diff", "requirements.txt", "companion.json", "estimate.json",
         "accelerate_config.yaml", "ds_config.json")
MAX_FILE_BYTES = 64 << 20  # a larger log goes in as its last 64 MiB


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret variables of `environ` (default: this process's environment), longest first."""
    return env_secret_values(os.environ if environ is None else environ)


def write_bundle(run_dir: Path | str, summary: dict[str, Any], target: Path | str,
                 environ: Mapping[str, str] | None = None) -> tuple[int, list[str]]:
    """Write the zip (atomically); returns (its size in bytes, the names inside)."""
    run_dir = Path(run_dir)
    masker = TextMasker(secret_values(environ))
    names: list[str] = []
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in FILES:
            try:
                handle = open(run_dir / name, "rb")
            except OSError:
                continue
            with handle, archive.open(f"{run_dir.name}/{name}", "w", force_zip64=True) as member:
                try:
                    size = os.fstat(handle.fileno()).st_size
                    if size > MAX_FILE_BYTES:
                        handle.seek(size - MAX_FILE_BYTES)
                        handle.readline()  # from the first whole line on
                    for piece in masker.stream(handle):
                        member.write(piece)
                except OSError:
                    pass  # what could be read is in
            names.append(name)
        text = json.dumps(summary, indent=2, default=str).encode()
        archive.writestr(f"{run_dir.name}/summary.json", masker.mask(text))
        names.append("summary.json")
    payload = buffer.getvalue()
    atomic_write_bytes(Path(target), payload)
    return len(payload), names
