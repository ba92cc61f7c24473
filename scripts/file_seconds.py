"""Write tests/file_seconds.json from a pytest JUnit XML report: each test file's total
seconds, which tests/conftest.py uses to hand the longest files to the workers first.

    ./scripts/test --junitxml=/tmp/suite.xml
    .venv/bin/python scripts/file_seconds.py /tmp/suite.xml

Any run will do (serial or parallel, loaded or not): only the files' order matters.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "tests" / "file_seconds.json"


def file_seconds(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for case in ET.parse(report).iter("testcase"):
        # classname is the dotted module (tests.test_x), then a class for tests in one.
        parts = (case.get("classname") or "").split(".")
        file = "/".join(parts[:2]) + ".py"
        seconds[file] = seconds.get(file, 0.0) + float(case.get("time") or 0.0)
    return {file: round(total, 1) for file, total in sorted(seconds.items())}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    found = file_seconds(Path(argv[0]))
    if not found:
        print(f"no test cases in {argv[0]}", file=sys.stderr)
        return 1
    OUT.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    print(f"{len(found)} files, {sum(found.values()):.0f} s in all -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
