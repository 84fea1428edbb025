"""The capacity review (`gpuaudit report`).

Pure aggregation first (``holders``, ``summary``, ``whatif``, ``packing``,
``period``, ``gate``), then storage (``history``, SQLite) and rendering
(``charts`` for SVG geometry, ``render`` for the Jinja2 templates in
``templates/``). ``build`` puts the pieces together into one JSON-ready dict;
report.json is that dict, and report.html and report.md are rendered from it,
so the three carry the same numbers.
"""
