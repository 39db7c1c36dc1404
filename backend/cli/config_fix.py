"""`traindeck config fix FILE -o OUT`: repair a pasted config (lost indentation, JSON punctuation, typos).

Registered into the `config` group by backend/cli/config_cmd.py: `register_fix(config_subparsers)`.
OUT `-` writes the repaired text to standard output and the report to standard error, so that the output holds
only the file and can be piped or redirected.
Exit 0: OUT written (the changes are printed, or that there was nothing to repair), and `config check` accepts it.
Exit 1: nothing written, because the text cannot be parsed even after the fixes, a fix would be a guess, or the
repaired config would still be refused by `config check` (each such place is printed). Files too big, binary or
not UTF-8 are refused in one line (exit 2), as `config check` refuses them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from traindeck.backend.cli import UserError


def register_fix(config_subparsers: argparse._SubParsersAction) -> None:
    p = config_subparsers.add_parser(
        "fix", help="rewrite a pasted config into the one that was meant, listing each change",
        description="Repair an accelerate YAML or DeepSpeed JSON: keys whose indentation was lost, trailing or "
                    "missing commas, Python True/False/None, comments, misspelt values and keys, old key names. "
                    "Ambiguous fixes are reported, never guessed.")
    p.add_argument("file", metavar="FILE", help="the config to repair")
    p.add_argument("-o", "--output", metavar="OUT", required=True,
                   help="where to write the repaired config (may be FILE itself; `-` for standard output)")
    p.set_defaults(handler=run_fix)


def run_fix(args: argparse.Namespace) -> int:
    from traindeck.backend.config import BoundsError, read_config_text, repair_text
    from traindeck.backend.core import atomic_write_text

    source = Path(args.file)
    try:
        text = read_config_text(source)
    except OSError as exc:
        raise UserError(f"cannot read {source}: {exc.strerror or exc}") from None
    except BoundsError as exc:
        where = f":{exc.line}" + (f":{exc.column}" if exc.column else "") if exc.line else ""
        raise UserError(f"{source}{where}: {exc}") from None
    result = repair_text(text, file=str(source))
    to_stdout = args.output == "-"
    report = sys.stderr if to_stdout else sys.stdout  # stdout carries only the file when it is the output
    report.write("".join(f"{source}: {line}\n" for line in result.changes + result.notes))
    left = _still_refused(result.text_out, source) if result.text_out is not None and not result.problems else []
    if result.text_out is None:  # one line: where the text stops being readable, even leniently
        why = "; ".join(p.removeprefix("cannot repair: ") for p in result.problems)
        print(f"traindeck: {source} cannot be repaired: {why}; nothing written", file=sys.stderr)
        return 1
    if result.problems or left:
        for problem in result.problems:
            print(f"{source}: {problem}", file=sys.stderr)
        for message in left:
            print(f"{source}: still refused after the repair: {message}", file=sys.stderr)
        what = f"{len(result.problems)} place(s) need a decision" if result.problems else \
            f"`config check` would still refuse it: {len(left)} error(s) left to fix by hand"
        print(f"traindeck: {source} not repaired ({what}); nothing written", file=sys.stderr)
        return 1
    if to_stdout:
        sys.stdout.write(result.text_out)
        sys.stdout.flush()
        if not result.changes:
            print(f"{source}: nothing to repair; written unchanged to standard output", file=sys.stderr)
        else:
            print(f"wrote standard output ({len(result.changes)} change(s))", file=sys.stderr)
        return 0
    out = Path(args.output)
    try:
        atomic_write_text(out, result.text_out, mode=_mode_for(out, source))
    except OSError as exc:
        raise UserError(f"cannot write {out}: {exc.strerror or exc}") from None
    if not result.changes:
        print(f"{source}: nothing to repair; written unchanged to {out}")
    else:
        print(f"wrote {out} ({len(result.changes)} change(s))")
    return 0


def _still_refused(text: str, source: Path) -> list[str]:
    """The errors `config check` would still report in the repaired text (path and message: the lines of a
    re-nested text are not the source's)."""
    from traindeck.backend.config import check_document, parse_text

    doc = parse_text(text, file=str(source), locate=False)
    return [f"{m.path}: {m.message}" if m.path else m.message
            for m in check_document(doc) if m.severity == "error"]


def _mode_for(out: Path, source: Path) -> int:
    """Keep the permissions of the file being replaced (or of the source); a new file gets 0644 like an editor's."""
    for candidate in (out, source):
        try:
            return candidate.stat().st_mode & 0o777
        except OSError:
            continue
    return 0o644
