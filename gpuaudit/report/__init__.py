"""The capacity review (`gpuaudit report`).

Pure aggregation first (``holders``, ``summary``, ``whatif``, ``packing``,
``period``, ``gate``), then storage (``history``, SQLite) and rendering
(``charts`` for SVG geometry, ``render`` for the Jinja2 templates in
``templates/``). ``build`` puts the pieces together into one JSON-ready dict;
report.json is that dict, and report.html and report.md are rendered from it,
so the three carry the same numbers. ``fleet`` lays several clusters' dicts
side by side with their sums.

What the tool's own fix would change is not computed here (``report`` may not
import ``remediate``): ``pipelines/report.py`` plans the fix and passes the
result in as plain data (``build.analyse(..., overlay=...)``).
"""
