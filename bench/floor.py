"""The floor: read the same manifest files and parse them with PyYAML's C
loader (``yaml.CSafeLoader``), and nothing else. No line numbers, no workload
model, no rules: any tool that reads these YAML files in Python pays this much.

    python bench/floor.py PATH...   (prints the number of YAML documents)
    python bench/floor.py --preload MODULES PATH...

``--preload MODULES``: first import each module named in the file MODULES
(one a line, in order): the floor of a tool that needs those modules. The
pre-commit case gives it what `gpuaudit check` imports, gpuaudit's own
modules excepted, so that what check adds to its dependencies shows.
"""

from __future__ import annotations

import contextlib
import importlib
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


def preload(listing: str) -> None:
    with open(listing, encoding="utf-8") as handle:
        for name in handle.read().split():
            importlib.import_module(name)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--preload"]:
        preload(args[1])
        args = args[2:]
    sys.exit(main(args))
