"""What a GPU workload is for: service, training, batch, benchmark, smoke
test, stress test, placeholder, demo, or unknown; and which signal said so.

The tables are data (gpuaudit/data/purposes.yaml, where the order of the
signals is explained); this module only applies them, in that order, to what
the model holds: each container's image and command line (and what
facts/activity.py made of it), the workload's name and labels, its kind and
class, and the file it was read from. Rules read the fact through their
``severity_by_purpose`` (engine/rules.py): how much their advice matters for
a workload of each purpose.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import msgspec

from gpuaudit.bundled import data_yaml
from gpuaudit.facts.activity import command_script
from gpuaudit.model import Container, Workload

_SEGMENTS = re.compile(r"/|\\|__")
_SEGMENT = re.compile(r"[;&|\n]")  # shell segments of a script


class _Entry(msgspec.Struct, frozen=True):
    purpose: str
    pattern: re.Pattern[str]
    why: str
    gpu_only: bool = False
    idle_only: bool = False


class _Tables(msgspec.Struct, frozen=True):
    purposes: tuple[str, ...]
    programs: tuple[_Entry, ...]
    check_programs: frozenset[str]
    check_beside: frozenset[str]
    check_why: str
    images: tuple[_Entry, ...]
    names: tuple[_Entry, ...]
    base_images: re.Pattern[str]
    placeholder_images: _Entry
    server_images: _Entry
    demo_contexts: frozenset[str]
    training: re.Pattern[str]
    training_kinds: frozenset[str]
    classes: Mapping[str, str]


def _entries(raw: Iterable[Mapping[str, Any]]) -> tuple[_Entry, ...]:
    return tuple(
        _Entry(
            str(e["purpose"]),
            re.compile(e["match"], re.IGNORECASE),
            str(e["why"]),
            gpu_only=e.get("scope") == "gpu",
            idle_only=bool(e.get("idle")),
        )
        for e in raw
    )


@cache
def tables() -> _Tables:
    data = data_yaml("purposes.yaml")
    holder = data["placeholder_images"]
    return _Tables(
        purposes=tuple(data["purposes"]),
        programs=_entries(data["programs"]),
        check_programs=frozenset(str(p).lower() for p in data["checks"]["programs"]),
        check_beside=frozenset(str(p).lower() for p in data["checks"]["beside"]),
        check_why=str(data["checks"]["why"]),
        images=_entries(data["images"]),
        names=_entries(data["names"]),
        base_images=re.compile(data["base_images"], re.IGNORECASE),
        placeholder_images=_Entry("placeholder", re.compile(holder["match"], re.IGNORECASE), str(holder["why"])),
        server_images=_Entry(
            "service", re.compile(data["server_images"]["match"], re.IGNORECASE), str(data["server_images"]["why"])
        ),
        demo_contexts=frozenset(str(s).lower() for s in data["demo_contexts"]),
        training=re.compile(data["training"], re.IGNORECASE),
        training_kinds=frozenset(data["training_kinds"]),
        classes=dict(data["classes"]),
    )


def purposes() -> tuple[str, ...]:
    """Every value the ``purpose`` fact takes (``unknown`` last)."""
    return tables().purposes


def _decided(purpose: str, signal: str, value: str, why: str) -> dict[str, Any]:
    return {"purpose": purpose, "purpose_evidence": {"signal": signal, "value": _short(value), "why": why}}


def purpose_facts(
    w: Workload,
    activities: Mapping[str, Mapping[str, Any]],
    *,
    long_running: bool,
    name: str | None = None,
    file: str | None = None,
) -> dict[str, Any]:
    """``purpose`` and ``purpose_evidence`` (signal, the value that matched,
    why) of ``w``. ``activities``: facts/activity.py's container_activity by
    container pointer, for every container of its templates; ``long_running``:
    its kind runs until stopped (an idle command there never ends); ``name`` and
    ``file``: what to read for the name and the file context, when not the
    workload's own (a live pod is named after its owner, and has no file)."""
    t = tables()
    containers = [c for tpl in w.templates for c in (*tpl.init_containers, *tpl.containers)]
    holders = [c for tpl in w.templates for c in tpl.containers if c.gpus]
    if not holders:  # GPUs only in an init container or a pod-level claim
        holders = [c for c in containers if c.gpus]
    scripts = {c.pointer: command_script(c) for c in containers}

    # 1: what a container runs (a device check alone, then the table), 2: its image.
    for c in holders:
        if _only_checks(scripts[c.pointer], t):
            return _decided("smoke-test", "program", f"{c.name}: {scripts[c.pointer]}", t.check_why)
    for table, text, signal in (
        (t.programs, lambda c: scripts[c.pointer], "program"),
        (t.images, lambda c: c.image, "image"),
    ):
        for entry in table:
            for c in holders if entry.gpu_only else containers:
                found = entry.pattern.search(text(c) or "")
                if found:
                    return _decided(entry.purpose, signal, f"{c.name}: {text(c)}", entry.why)

    name = name if name is not None else (w.name or str(_meta(w.document.obj).get("generateName") or ""))
    labelled = [name, *_label_values(w)]

    # 3: no GPU container does GPU work.
    if holders and all(_idle(c, activities.get(c.pointer) or {}, t) for c in holders):
        context = _demo_context(file if file is not None else w.document.file, t)
        if context:
            return _decided(
                "demo", "context", context, "its GPU containers do no GPU work, in a file written to show something"
            )
        for entry in t.names:
            if entry.purpose in ("demo", "placeholder"):
                found = next((v for v in labelled if entry.pattern.search(v)), None)
                if found:
                    return _decided(entry.purpose, "name", found, entry.why)
        holder = t.placeholder_images
        for c in holders:
            if holder.pattern.search(c.image):
                return _decided("placeholder", "image", f"{c.name}: {c.image}", holder.why)
        ends = not long_running and all(
            (activities.get(c.pointer) or {}).get("command_kind") == "idle" for c in holders
        )
        if ends:
            text = next(
                (a["command_text"] for c in holders if (a := activities.get(c.pointer) or {}).get("command_text")), ""
            )
            return _decided(
                "smoke-test",
                "idle",
                text,
                "it holds GPUs for a command that ends without GPU work: a check that they are there",
            )
        for entry in t.names:
            if not entry.idle_only:
                found = next((v for v in labelled if entry.pattern.search(v)), None)
                if found:
                    return _decided(entry.purpose, "name", found, entry.why)
        return _decided("unknown", "idle", "", "its GPU containers do no GPU work, and nothing says why")

    # 4: what it is called.
    for entry in t.names:
        if not entry.idle_only:
            found = next((v for v in labelled if entry.pattern.search(v)), None)
            if found:
                return _decided(entry.purpose, "name", found, entry.why)

    # 5, 6: a model server; a training run.
    server = next((c for c in holders if (activities.get(c.pointer) or {}).get("command_kind") == "server"), None)
    if server is not None:
        return _decided(
            "service", "server", f"{server.name}: {server.image}", "it runs a model server, which serves until stopped"
        )
    for c in holders:
        if t.server_images.pattern.search(c.image):
            return _decided("service", "image", f"{c.name}: {c.image}", t.server_images.why)
    for c in holders:
        found = t.training.search(scripts[c.pointer])
        if found:
            return _decided("training", "program", f"{c.name}: {scripts[c.pointer]}", "its command trains a model")

    # 7: the kind.
    if w.kind in t.training_kinds:
        return _decided("training", "kind", w.kind, "a training operator's kind")
    by_class = t.classes.get(w.workload_class)
    if by_class is not None:
        return _decided(by_class, "kind", f"{w.kind} ({w.workload_class})", f"a {w.workload_class} kind")
    return _decided("unknown", "none", "", "nothing in the manifest says")


def _only_checks(script: str, t: _Tables) -> bool:
    """Every shell segment of ``script`` runs a device check or a program
    beside it (echo, sleep), and one runs a check."""
    programs = [posixpath.basename(words[0]).lower() for words in (s.split() for s in _SEGMENT.split(script)) if words]
    allowed = t.check_programs | t.check_beside
    return any(p in t.check_programs for p in programs) and all(p in allowed for p in programs)


def _idle(c: Container, activity: Mapping[str, Any], t: _Tables) -> bool:
    if activity.get("command_kind") in ("idle", "idle_forever"):
        return True
    return not c.command and not c.args and bool(t.base_images.search(c.image))


def _demo_context(file: str, t: _Tables) -> str | None:
    """The segment of the file's path (a folder, or the file name's stem)
    that says it was written to show something."""
    for segment in _SEGMENTS.split(file or ""):
        stem = segment.lower().rsplit(".", 1)[0] if "." in segment else segment.lower()
        if stem in t.demo_contexts or segment.lower() in t.demo_contexts:
            return segment
    return None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _label_values(w: Workload) -> list[str]:
    values: list[str] = []
    sources: Sequence[Any] = [_meta(w.document.obj).get("labels"), *(t.labels for t in w.templates)]
    for labels in sources:
        if isinstance(labels, Mapping):
            values += [str(v) for v in labels.values() if isinstance(v, str)]
    return values


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."
