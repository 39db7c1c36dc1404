"""MkDocs hook: the command-line reference is generated from traindeck's own argparse parsers at build time.

docs/cli.md holds the marker below; `on_page_markdown` replaces it with the `--help` of `traindeck`, of every
command and of every sub-command (`traindeck runs show`, `traindeck queue add`, ...), taken from the parser that
`traindeck` itself builds (`traindeck.backend.cli.build_parser`). A new command is therefore in the reference as
soon as it is registered, and an option's help text is written once, in the code.

Commands whose names start with "_" are internal (the run supervisor and its helpers start them) and are left out.

The package is imported from this checkout (the folder that holds mkdocs.yml), whatever the checkout's folder is
called and whichever traindeck an editable install points at: the page documents the code beside it. Building
the parser imports only the standard library.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"
WIDTH = 100  # columns the help text is wrapped to (argparse reads COLUMNS)


def build_parser() -> argparse.ArgumentParser:
    """The real top-level parser of this checkout's `traindeck` command."""
    loaded = sys.modules.get("traindeck")
    if loaded is None:
        spec = importlib.util.spec_from_file_location("traindeck", ROOT / "__init__.py",
                                                      submodule_search_locations=[str(ROOT)])
        if spec is None or spec.loader is None:
            raise PluginError(f"cli_reference: cannot load traindeck from {ROOT}")
        loaded = importlib.util.module_from_spec(spec)
        sys.modules["traindeck"] = loaded
        spec.loader.exec_module(loaded)
    elif Path(loaded.__file__ or "").resolve().parent != ROOT:
        raise PluginError(f"cli_reference: traindeck is already imported from {loaded.__file__}, not from {ROOT}")
    from traindeck.backend.cli import build_parser as traindeck_parser

    return traindeck_parser()


def subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each public sub-command of `parser`, in registration order."""
    found = []
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if not name.startswith("_"):
                found.append((name, helps.get(name, ""), sub))
    return found


def _help_text(parser: argparse.ArgumentParser) -> str:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)
    try:
        return parser.format_help().rstrip()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _section(name: str, summary: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    lines = [f"{'#' * level} `{name}`", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ("" if summary.endswith(".") else "."), ""]
    lines += ["```text", _help_text(parser), "```", ""]
    for sub_name, sub_summary, sub in subcommands(parser):
        lines += _section(f"{name} {sub_name}", sub_summary, sub, min(level + 1, 4))
    return lines


def render_cli_reference(parser: argparse.ArgumentParser | None = None) -> str:
    """The reference as Markdown: a table of the commands, then each command's help, sub-commands nested."""
    parser = parser or build_parser()
    commands = subcommands(parser)
    lines = ["| command | what it does |", "| --- | --- |"]
    for name, summary, _ in commands:
        anchor = f"traindeck-{name}".replace(" ", "-")
        lines.append(f"| [`traindeck {name}`](#{anchor}) | {summary} |")
    lines += ["", "## `traindeck`", "", "```text", _help_text(parser), "```", ""]
    for name, summary, sub in commands:
        lines += _section(f"traindeck {name}", summary, sub, 2)
    return "\n".join(lines)


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise PluginError(f"cli_reference: docs/{PAGE} has lost its marker {MARKER}")
    return markdown.replace(MARKER, render_cli_reference())
