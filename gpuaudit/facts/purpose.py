"""What a GPU workload is for: service, training, batch, benchmark, smoke
test, stress test, placeholder, demo, or unknown; and which signal said so.

The tables are data (gpuaudit/data/purposes.yaml, where the order of the
signals and how entries match are explained); this module only applies them,
in that order, to what the model holds: each container's image and command
line (and what facts/activity.py made of it), the workload's name and
labels, its kind and class, and the file it was read from. Rules read the
fact through their ``severity_by_purpose`` (engine/rules.py): how much their
advice matters for a workload of each purpose.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from typing import Any

import msgspec

from gpuaudit.bundled import data_yaml
from gpuaudit.facts.activity import command_script, saturates_gpus
from gpuaudit.facts.scheduling import required_terms
from gpuaudit.kube.shapes import as_list
from gpuaudit.model import Container, PodTemplate, Workload

_PATH_PARTS = re.compile(r"/|\\|__")  # folders, and `__` in files copied flat
_SHELL_SEGMENTS = re.compile(r"[;&|\n]")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
_STRESS = "a stress or burn-in test (gpu_programs.yaml saturating) exists to load whole GPUs"


class _Entry(msgspec.Struct, frozen=True):
    """One row of a table: a purpose and what says it (purposes.yaml)."""

    purpose: str
    why: str
    any: tuple[str, ...] = ()
    none: tuple[str, ...] = ()
    shorter_than: int | None = None
    words: tuple[str, ...] = ()
    names: tuple[str, ...] = ()
    gpu_only: bool = False
    idle_only: bool = False

    def finds(self, text: str) -> bool:
        """``text`` (a command line or an image) holds one of ``any``, none
        of ``none``, and is short enough; or, an image, is one of ``names``."""
        low = text.lower()
        if self.shorter_than is not None and len(low) >= self.shorter_than:
            return False
        if any(n in low for n in self.none):
            return False
        return any(a in low for a in self.any) or bool(self.names and _image_named(low, self.names))

    def names_it(self, text: str) -> bool:
        """A name or label value holds one of ``words`` as whole words."""
        joined = f"-{_NOT_ALNUM.sub('-', text.lower()).strip('-')}-"
        return any(f"-{w}-" in joined for w in self.words)


class _Tables(msgspec.Struct, frozen=True):
    purposes: tuple[str, ...]
    programs: tuple[_Entry, ...]
    check_programs: frozenset[str]
    check_beside: frozenset[str]
    check_why: str
    images: tuple[_Entry, ...]
    base_names: frozenset[str]
    base_tags_of: frozenset[str]
    placeholder_images: _Entry
    demo_contexts: frozenset[str]
    demo_words: frozenset[str]
    demo_file_words: frozenset[str]
    test_contexts: frozenset[str]
    test_words: frozenset[str]
    retired_words: frozenset[str]
    simulated: Mapping[str, Any]
    names: tuple[_Entry, ...]
    server_images: _Entry
    training: tuple[str, ...]
    training_scripts: tuple[str, ...]
    training_kinds: frozenset[str]
    classes: Mapping[str, str]


def _entry(e: Mapping[str, Any], purpose: str | None = None) -> _Entry:
    lower = lambda key: tuple(str(v).lower() for v in e.get(key) or ())  # noqa: E731
    return _Entry(
        purpose=str(purpose or e["purpose"]),
        why=str(e["why"]),
        any=lower("any"),
        none=lower("none"),
        shorter_than=e.get("shorter_than"),
        words=tuple(_NOT_ALNUM.sub("-", w).strip("-") for w in lower("words")),
        names=lower("names"),
        gpu_only=e.get("scope") == "gpu",
        idle_only=bool(e.get("idle")),
    )


def _entries(raw: Iterable[Mapping[str, Any]]) -> tuple[_Entry, ...]:
    return tuple(_entry(e) for e in raw)


@cache
def tables() -> _Tables:
    data = data_yaml("purposes.yaml")
    base = data["base_images"]
    return _Tables(
        purposes=tuple(data["purposes"]),
        programs=_entries(data["programs"]),
        check_programs=frozenset(str(p).lower() for p in data["checks"]["programs"]),
        check_beside=frozenset(str(p).lower() for p in data["checks"]["beside"]),
        check_why=str(data["checks"]["why"]),
        images=_entries(data["images"]),
        base_names=frozenset(str(n).lower() for n in base["names"]),
        base_tags_of=frozenset(str(n).lower() for n in base["base_tags_of"]),
        placeholder_images=_entry(data["placeholder_images"], "placeholder"),
        demo_contexts=frozenset(str(s).lower() for s in data["demo_contexts"]),
        demo_words=frozenset(str(s).lower() for s in data["demo_words"]),
        demo_file_words=frozenset(str(s).lower() for s in data["demo_file_words"]),
        test_contexts=frozenset(str(s).lower() for s in data["test_contexts"]),
        test_words=frozenset(str(s).lower() for s in data["test_words"]),
        retired_words=frozenset(str(s).lower() for s in data["retired_words"]),
        simulated=data["simulated"],
        names=_entries(data["names"]),
        server_images=_entry(data["server_images"], "service"),
        training=tuple(str(a).lower() for a in data["training"]["any"]),
        training_scripts=tuple(str(a).lower() for a in data["training"]["scripts"]),
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
    templates: Sequence[PodTemplate] | None = None,
    name: str | None = None,
    file: str | None = None,
) -> dict[str, Any]:
    """``purpose`` and ``purpose_evidence`` (signal, the value that matched,
    why) of ``w``. ``activities``: facts/activity.py's container_activity by
    container pointer, for every container of its templates; ``long_running``:
    its kind runs until stopped (an idle command there never ends); ``name`` and
    ``file``: what to read for the name and the file context, when not the
    workload's own (a live pod is named after its owner, and has no file);
    ``templates``: its templates as the facts read them (env completed from
    ConfigMaps), when not the workload's own."""
    t = tables()
    templates = w.templates if templates is None else templates
    containers = [c for tpl in templates for c in (*tpl.init_containers, *tpl.containers)]
    holders = [c for tpl in templates for c in tpl.containers if c.gpus]
    if not holders:  # GPUs only in an init container or a pod-level claim
        holders = [c for c in containers if c.gpus]
    scripts = {c.pointer: command_script(c) for c in containers}

    # 0: it runs on simulated nodes.
    gpu_templates = [tpl for tpl in templates if any(c.gpus for c in (*tpl.containers, *tpl.init_containers))]
    simulated = [_simulated_by(tpl, t.simulated) for tpl in gpu_templates]
    if simulated and all(simulated):
        return _decided("simulated", "placement", str(simulated[0]), str(t.simulated["why"]))

    # 1: what a container runs (a stress test, a device check alone, then the table); 2: its image.
    for c in holders:
        if saturates_gpus(c):
            value = f"{c.name}: {scripts[c.pointer] or c.image}"
            return _decided("stress-test", "program" if scripts[c.pointer] else "image", value, _STRESS)
    for c in holders:
        if _only_checks(scripts[c.pointer], t):
            return _decided("smoke-test", "program", f"{c.name}: {scripts[c.pointer]}", t.check_why)
    for table, signal in ((t.programs, "program"), (t.images, "image")):
        for entry in table:
            for c in holders if entry.gpu_only else containers:
                text = scripts[c.pointer] if signal == "program" else c.image
                if text and entry.finds(text):
                    return _decided(entry.purpose, signal, f"{c.name}: {text}", entry.why)

    name = name if name is not None else (w.name or str(_meta(w.document.obj).get("generateName") or ""))
    labelled = [name, *_label_values(w)]

    # 3: no GPU container does GPU work.
    if holders and all(_idle(c, activities.get(c.pointer) or {}, t) for c in holders):
        context = _demo_context(file if file is not None else w.document.file, t)
        if context:
            why = "its GPU containers do no GPU work, in a file written to show something"
            return _decided("demo", "context", context, why)
        found = _named(t.names, labelled, idle=True)
        if found is not None:
            return found
        for c in holders:
            if t.placeholder_images.finds(c.image):
                return _decided("placeholder", "image", f"{c.name}: {c.image}", t.placeholder_images.why)
        if not long_running and all((activities.get(c.pointer) or {}).get("command_kind") == "idle" for c in holders):
            shown = next(
                (a["command_text"] for c in holders if (a := activities.get(c.pointer) or {}).get("command_text")), ""
            )
            why = "it holds GPUs for a command that ends without GPU work: a check that they are there"
            return _decided("smoke-test", "idle", shown, why)
        found = _named(t.names, labelled, idle=False)
        if found is not None:
            return found
        return _decided("unknown", "idle", "", "its GPU containers do no GPU work, and nothing says why")

    # 4: what it is called.
    found = _named(t.names, labelled, idle=False)
    if found is not None:
        return found

    # 5, 6: a model server; a training run.
    for c in holders:
        if (activities.get(c.pointer) or {}).get("command_kind") == "server":
            return _decided(
                "service", "server", f"{c.name}: {c.image}", "it runs a model server, which serves until stopped"
            )
    for c in holders:
        if t.server_images.finds(c.image):
            return _decided("service", "image", f"{c.name}: {c.image}", t.server_images.why)
    for c in holders:
        if _trains(scripts[c.pointer], t):
            return _decided("training", "program", f"{c.name}: {scripts[c.pointer]}", "its command trains a model")

    # 7: the kind.
    if w.kind in t.training_kinds:
        return _decided("training", "kind", w.kind, "a training operator's kind")
    by_class = t.classes.get(w.workload_class)
    if by_class is not None:
        return _decided(by_class, "kind", f"{w.kind} ({w.workload_class})", f"a {w.workload_class} kind")
    return _decided("unknown", "none", "", "nothing in the manifest says")


def _simulated_by(tpl: PodTemplate, table: Mapping[str, Any]) -> str | None:
    """What sends the pod shape to simulated nodes (purposes.yaml
    `simulated`): a toleration, a node label it asks for, an annotation."""
    spec = tpl.spec
    for toleration in as_list(spec.get("tolerations")):
        if isinstance(toleration, Mapping) and toleration.get("key") in table["toleration_keys"]:
            return f"toleration {toleration.get('key')}"
    wanted = {str(k): {str(v) for v in vs} for k, vs in table["node_labels"].items()}
    selector = spec.get("nodeSelector")
    if isinstance(selector, Mapping):
        for key, value in selector.items():
            if str(value) in wanted.get(str(key), ()):
                return f"nodeSelector {key}={value}"
    terms = required_terms(spec)  # ORed: every term must ask for a simulated node
    asked = [_asks(term, wanted) for term in terms]
    if asked and all(asked):
        return str(asked[0])
    for key in tpl.annotations:
        if key.split("/", 1)[0].endswith(tuple(table["annotation_domains"])):
            return f"annotation {key}"
    return None


def _asks(term: Mapping[str, Any], wanted: Mapping[str, set[str]]) -> str | None:
    for expression in as_list(term.get("matchExpressions")):
        if isinstance(expression, Mapping) and expression.get("operator") == "In":
            values = {str(v) for v in as_list(expression.get("values"))}
            if values and values <= wanted.get(str(expression.get("key")), set()):
                return f"node affinity {expression.get('key')} In {sorted(values)}"
    return None


def _named(entries: Sequence[_Entry], labelled: Sequence[str], *, idle: bool) -> dict[str, Any] | None:
    """The first entry (of those for idle workloads, or the others) that a
    name or label value says."""
    for entry in entries:
        if entry.idle_only == idle:
            found = next((v for v in labelled if entry.names_it(v)), None)
            if found is not None:
                return _decided(entry.purpose, "name", found, entry.why)
    return None


def _only_checks(script: str, t: _Tables) -> bool:
    """Every shell segment of ``script`` runs a device check or a program
    beside it (echo, sleep), and one runs a check."""
    segments = (s.split() for s in _SHELL_SEGMENTS.split(script))
    programs = [posixpath.basename(words[0]).lower() for words in segments if words]
    allowed = t.check_programs | t.check_beside
    return any(p in t.check_programs for p in programs) and all(p in allowed for p in programs)


def _trains(script: str, t: _Tables) -> bool:
    low = script.lower()
    if any(a in low for a in t.training):
        return True
    return any(
        word.endswith(".py") and any(s in posixpath.basename(word) for s in t.training_scripts) for word in low.split()
    )


def _image_name(image: str) -> tuple[str, str]:
    """(name, tag) of an image reference: `busybox`, `1.36` of docker.io/library/busybox:1.36."""
    ref = image.partition("@")[0]
    last = ref.rsplit("/", 1)[-1]
    name, _, tag = last.partition(":")
    return name, tag


def _image_named(image: str, names: Iterable[str]) -> bool:
    name, _ = _image_name(image)
    return any(name == n or name.endswith(f"-{n}") for n in names)


def _idle(c: Container, activity: Mapping[str, Any], t: _Tables) -> bool:
    if activity.get("command_kind") in ("idle", "idle_forever"):
        return True
    if c.command or c.args:
        return False
    name, tag = _image_name(c.image.lower())
    return name in t.base_names or (name in t.base_tags_of and "base" in tag)


def _demo_context(file: str, t: _Tables) -> str | None:
    """The segment of the file's path (a folder, or the file name's stem)
    that says it was written to show something."""
    for segment in _PATH_PARTS.split(file or ""):
        low = segment.lower()
        if low in t.demo_contexts or low.rsplit(".", 1)[0] in t.demo_contexts:
            return segment
        if not t.demo_words.isdisjoint(_NOT_ALNUM.split(low)):
            return segment
    return None


def file_context(file: str, roots: Sequence[str]) -> str | None:
    """Where the file of a manifest sits, read from its path below the
    folder it was found under (one of ``roots``, the folders named on the
    command line): ``test`` (a test folder: fixtures, golden files),
    ``example`` (written to show something: examples/, docs/, a tutorial),
    or None (a file to deploy). The folders above the root say nothing of
    the repository (a checkout under ~/tests/); a file the user names on its
    own is one they want judged as it stands."""
    below = _below(file, roots)
    if below is None:
        return None
    t = tables()
    segments = [segment.lower() for segment in _PATH_PARTS.split(below)]
    # Real folders below the first, and not a flat copy's (`owner__repo`):
    # the first may be a repository's own name when the root holds several
    # (a repository named kubernetes-engine-samples holds services to deploy).
    folders = [f for f in below.lower().replace("\\", "/").split("/")[1:-1] if "__" not in f]
    worded = [set(_NOT_ALNUM.split(f)) for f in folders]
    stem = segments[-1].rsplit(".", 1)[0]
    stem_words = set(_NOT_ALNUM.split(stem))
    # A hidden folder says the same as its name (.archive/ is archive/).
    folder_names = [name for segment in segments[:-1] for name in (segment, segment.lstrip("."))]
    if (
        any(name in t.test_contexts for name in folder_names)
        or any(not t.test_words.isdisjoint(w) for w in (*worded, stem_words))
        or any(not t.retired_words.isdisjoint(_NOT_ALNUM.split(segment)) for segment in segments[:-1])
    ):
        return "test"
    # Whole folder names and the file's stem; a word inside a folder's name
    # (sample-jobs, mnist_demo) or the file's own (samples-tf-mnist-demo).
    if any(s in t.demo_contexts for s in (*segments[:-1], stem)):
        return "example"
    if any(not t.demo_words.isdisjoint(w) for w in worded) or not t.demo_file_words.isdisjoint(stem_words):
        return "example"
    return None


def _below(file: str, roots: Sequence[str]) -> str | None:
    """``file``'s path below the deepest of ``roots`` that holds it, both as
    given (`check .` names what it finds `deploy/app.yaml`, `check repo`
    `repo/deploy/app.yaml`)."""
    found = root_of(file, roots)
    return found[1] if found is not None else None


def root_of(file: str, roots: Sequence[str]) -> tuple[str, str] | None:
    """The deepest of ``roots`` that holds ``file`` (both as given), and the
    file's path below it; None when no root holds it."""
    path = posixpath.normpath(file) if file else ""
    best: tuple[str, str] | None = None
    for root in roots:
        top = posixpath.normpath(root)
        if top == ".":  # the working directory: every relative path that stays inside it
            prefix, inside = "", bool(path) and not posixpath.isabs(path) and not path.startswith(("../", ".."))
        else:
            prefix = top.rstrip("/") + "/"
            inside = path.startswith(prefix)
        if inside and (best is None or len(prefix) > len(best[1])):
            best = (root, prefix)
    return (best[0], path[len(best[1]) :]) if best is not None else None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _label_values(w: Workload) -> list[str]:
    values: list[str] = []
    sources: Sequence[Any] = [_meta(w.document.obj).get("labels"), *(t.labels for t in w.templates)]
    for labels in sources:
        if isinstance(labels, Mapping):
            values += [v for v in labels.values() if isinstance(v, str)]
    return values


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 120 else text[:117] + "..."
