"""Write gpuaudit/data/parsed.json: the YAML files of gpuaudit/data, parsed
ahead, with the hash of each (bundled.data_yaml reads a file from it only
while the hash matches, and parses the YAML otherwise).

    .venv/bin/python scripts/gen_parsed_data.py           # rewrite it
    .venv/bin/python scripts/gen_parsed_data.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import sys

from gpuaudit import bundled


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args()
    path = bundled.PACKAGE / "data" / bundled.PARSED
    expected = bundled.parsed_data()
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if current == expected:
        return 0
    if args.check:
        print(f"{path} is stale: run .venv/bin/python scripts/gen_parsed_data.py", file=sys.stderr)
        return 1
    path.write_text(expected, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
