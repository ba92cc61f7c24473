"""Tables in docs/ that tests hold the code to: a Markdown table after ``<!-- table: NAME -->``."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def read_table(doc: str, name: str) -> tuple[list[str], list[list[str]]]:
    """The header and body cells of table ``name`` in ``docs/<doc>``, backticks stripped."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    start = lines.index(f"<!-- table: {name} -->") + 1
    rows: list[list[str]] = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip().strip("`") for cell in line.strip().strip("|").split("|")])
    header, separator, *body = rows
    assert all(set(cell) <= {"-", ":"} for cell in separator), f"{doc} {name}: bad separator"
    return header, body
