"""Write gpuaudit/facts/facts.schema.json, the schema rules are validated
against, from the fact types of gpuaudit/facts/types.py (how: the docstring of
gpuaudit/facts/schema.py).

    .venv/bin/python scripts/gen_fact_schema.py           # rewrite it
    .venv/bin/python scripts/gen_fact_schema.py --check   # exit 1 if it is stale
"""

from __future__ import annotations

import sys

from generated import main

from gpuaudit.facts import schema

if __name__ == "__main__":
    sys.exit(main(__doc__, schema.SCHEMA_PATH, schema.text, "scripts/gen_fact_schema.py"))
