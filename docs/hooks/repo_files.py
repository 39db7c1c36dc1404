"""MkDocs hook: the dashboard's screenshots live in resources/screenshots/ (the README shows them too) and the
pages link them as `../resources/screenshots/NAME.png`, a path that also works when the Markdown is read on a
code host. This hook adds those files to the build under that same relative path, so the links resolve in the
site and `mkdocs build --strict` checks them, without a second copy of the pictures under docs/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("resources/screenshots",)


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    docs_dir = Path(config["docs_dir"])
    for folder in SHARED:
        for path in sorted((ROOT / folder).glob("*.png")):
            rel = path.relative_to(ROOT).as_posix()
            files.append(File(f"../{rel}", src_dir=str(docs_dir), dest_dir=config["site_dir"],
                              use_directory_urls=config["use_directory_urls"], dest_uri=rel,
                              inclusion=InclusionLevel.INCLUDED))  # a "../" path would count as hidden
    return files
