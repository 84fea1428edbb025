"""What the scripts that write a generated file share: rewrite it, or with
--check only say whether the committed one is stale (exit 1)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(doc: str, path: Path, expected: Callable[[], str], script: str) -> int:
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args()
    text = expected()
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current == text:
        return 0
    if args.check:
        print(f"{path} is stale: run .venv/bin/python {script}", file=sys.stderr)
        return 1
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0
