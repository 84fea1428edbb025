"""Write gpuaudit/data/parsed.json: the YAML files of gpuaudit/data, parsed
ahead, with the hash of each (bundled.data_yaml reads a file from it only
while the hash matches, and parses the YAML otherwise).

    .venv/bin/python scripts/gen_parsed_data.py           # rewrite it
    .venv/bin/python scripts/gen_parsed_data.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import sys

from generated import main

from gpuaudit import bundled

if __name__ == "__main__":
    sys.exit(
        main(__doc__, bundled.PACKAGE / "data" / bundled.PARSED, bundled.parsed_data, "scripts/gen_parsed_data.py")
    )
