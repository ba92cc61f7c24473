"""Run a mention vectors file against the Python resolver (``shared/mentions/SPEC.md`` §8)::

    python -m room.mentions_check check shared/mentions/vectors.json

The twin of ``node web/mentions-check.mjs``. Prints ``N passed, M failed`` and exits 0 only when
nothing failed (a file with no cases fails too: it checks nothing); 2 when the file cannot be
read. The comparison itself is the pure :func:`room.rules.mentions.check_vectors`.
"""

from __future__ import annotations

import argparse
import json
import sys

from room.rules.mentions import check_vectors


def main(argv: list[str] | None = None) -> int:
    """``python -m room.mentions_check check PATH``: run a vectors file; exit 0 only if all pass."""
    parser = argparse.ArgumentParser(prog="python -m room.mentions_check")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="run a mention vectors file (SPEC.md §8)")
    check.add_argument("path")
    args = parser.parse_args(argv)
    try:
        with open(args.path, encoding="utf-8") as fh:
            data = json.load(fh)
        passed, failures = check_vectors(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"error: cannot run {args.path}: {exc!r}", file=sys.stderr)
        return 2
    for line in failures:
        print(line)
    print(f"{passed} passed, {len(failures)} failed")
    if passed + len(failures) == 0:
        print("error: the file has no cases", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
