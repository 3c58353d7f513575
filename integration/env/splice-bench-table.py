#!/usr/bin/env python3
"""Puts the table `make bench` measured into a markdown file.

    splice-bench-table.py DOC TABLE

Replaces what is between the lines <!-- bench-table:begin --> and
<!-- bench-table:end --> of DOC (docs/performance.md) with the contents of
TABLE (what TestBenchTable wrote to BRIDGE_BENCH_OUT). The rest of DOC is
left as it is. DOC must have each marker exactly once, in that order.
"""

import os
import sys

BEGIN = "<!-- bench-table:begin -->"
END = "<!-- bench-table:end -->"


def splice(doc: str, table: str) -> str:
    if doc.count(BEGIN) != 1 or doc.count(END) != 1 or doc.index(BEGIN) > doc.index(END):
        raise ValueError(f"want exactly one {BEGIN} before exactly one {END}")
    table = table.strip()
    if not table:
        raise ValueError("the table is empty")
    head, rest = doc.split(BEGIN)
    _, tail = rest.split(END)
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    doc_path, table_path = argv[1], argv[2]
    with open(doc_path, encoding="utf-8") as f:
        doc = f.read()
    with open(table_path, encoding="utf-8") as f:
        table = f.read()
    try:
        out = splice(doc, table)
    except ValueError as e:
        print(f"{doc_path}: {e}", file=sys.stderr)
        return 1
    # Write and rename: an interrupted run leaves the old file whole.
    tmp = doc_path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(out)
    os.replace(tmp, doc_path)
    print(f"{doc_path}: the table between the bench-table markers is now {table_path}'s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
