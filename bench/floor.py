"""The floor: read the same manifest files and parse them with PyYAML's C
loader (``yaml.CSafeLoader``), and nothing else. No line numbers, no workload
model, no rules: any tool that reads these YAML files in Python pays this much.

    python bench/floor.py PATH...   (prints the number of YAML documents)
"""

from __future__ import annotations

import contextlib
import os
import sys

import yaml

SUFFIXES = (".yaml", ".yml", ".json")  # what `gpuaudit check` reads


def files_under(path: str) -> list[str]:
    if not os.path.isdir(path):
        return [path]
    found = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        found.extend(os.path.join(root, n) for n in sorted(names) if n.endswith(SUFFIXES))
    return found


def main(paths: list[str]) -> int:
    documents = 0
    for path in paths:
        for file in files_under(path):
            with open(file, encoding="utf-8-sig", errors="replace") as handle:
                text = handle.read()
            # A file that is not YAML ends its own parse, not the run (as in check).
            with contextlib.suppress(yaml.YAMLError):
                for _ in yaml.load_all(text, Loader=yaml.CSafeLoader):
                    documents += 1
    print(documents)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
