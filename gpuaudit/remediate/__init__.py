"""Remediation: findings -> reviewable Kustomize overlays.

The pure core turns each finding (with the facts it was judged on) into a
*proposal* (which remediation template, with which computed parameters, and
why: planners.py, sizing.py), renders the template into *edits* (templates.py,
edits.py), applies them to a copy of the object to know the exact result,
encodes the difference as a strategic-merge or JSON 6902 patch (patches.py),
and lays out the overlay and its REVIEW.md (plan.py, overlay.py, review.py).
Only kustomize.py runs a program; the fix command writes the files.
"""
