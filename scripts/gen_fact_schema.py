"""Write gpuaudit/facts/facts.schema.json, the schema rules are validated
against, from the fact types of gpuaudit/facts/types.py (how: the docstring of
gpuaudit/facts/schema.py).

    .venv/bin/python scripts/gen_fact_schema.py           # rewrite it
    .venv/bin/python scripts/gen_fact_schema.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import sys

from gpuaudit.facts import schema


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args()
    expected = schema.text()
    path = schema.SCHEMA_PATH
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current == expected:
        return 0
    if args.check:
        print(f"{path} is stale: run .venv/bin/python scripts/gen_fact_schema.py", file=sys.stderr)
        return 1
    path.write_text(expected, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
