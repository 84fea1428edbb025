"""The loaded and compiled rule pack, cached by content hash between runs.

Loading the rules costs more than a pre-commit run's three files: every rule
file is parsed with its lines, validated against the rule schema, checked
against the fact schema, and each of its JSON Schemas is compiled to Python
(fastjsonschema writes source, ``compile()`` turns it into code). None of
that depends on the input, so ``load_rules_cached`` keeps the result in the
user's cache folder (``$XDG_CACHE_HOME/gpuaudit``, else
``~/.cache/gpuaudit``), keyed by a hash (256-bit BLAKE2b) of everything it
depends on:

- the rule folders and the path and bytes of every rule file in them;
- the config's params and severities (they are spliced into the schemas);
- the fact schema fragments and the rule schema;
- the source of the modules that load and compile rules, of the message
  sandbox and of fastjsonschema's (both found without importing them: a run
  that reads the cache never needs Jinja2 or the library), gpuaudit's
  version and Python's version.

Any change to one of them gives another key, so a stale entry is never
read. The entry holds plain data (each rule's fields, each load error) and
the compiled validators as code objects, serialized with ``marshal``.

Code objects are code: whoever can write the cache can run code in the next
``gpuaudit`` run. So, as ssh does with its own files, an entry is read only
when the folder and the file belong to this user and neither is writable by
the group or by others (the folder is created 0700, the file 0600); the file
is opened without following a symlink. The data format would not remove the
risk (pickle or JSON holding generated source would be as executable), the
ownership check does. An entry also carries a checksum of its payload (the
same hash as the key), checked before ``marshal`` reads it, so a truncated or
corrupted file is ignored.

An entry that is missing, foreign, corrupt or from another version is never
trusted: the rules are loaded and compiled as without a cache, and the entry
is written again (atomically: a temporary file in the same folder, renamed
into place). A cache that cannot be read or written is never an error; it
only costs the time it would have saved. ``GPUAUDIT_NO_CACHE=1`` turns it off.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from gpuaudit.engine import rules as rules_module
from gpuaudit.engine.rules import MAX_RULE_BYTES, Rule, RuleError, load_rules
from gpuaudit.facts.schema import SCHEMA_PATH as FACT_SCHEMA_PATH
from gpuaudit.files import blake2b, cache_dir, content_hash  # the key reads some 300 KB on every run

_MAGIC = b"gpuaudit-rules 2\n"
_DIGEST = 64  # hex characters of a 256-bit hash
# Entries kept in the folder, the most recently used: one per rule pack,
# config and version in use (a test suite's temporary rule folders make many).
_KEEP = 32
_RULE_FIELDS = tuple(f for f in Rule.__struct_fields__ if f != "compiled")


def load_rules_cached(
    dirs: Sequence[Path],
    params: Mapping[str, Mapping[str, Any]] | None = None,
    severities: Mapping[str, str] | None = None,
) -> tuple[list[Rule], list[RuleError]]:
    """What ``rules.load_rules`` returns for the same arguments, from the cache
    when it holds them, with each rule's validators compiled."""
    folder = None if os.environ.get("GPUAUDIT_NO_CACHE") else cache_dir()
    key = None
    if folder is not None:
        try:
            key = cache_key(dirs, params or {}, severities or {})
        except (OSError, TypeError, ValueError):  # an unreadable rule file: load reports it
            key = None
    if folder is not None and key is not None:
        cached = read_entry(folder, key)
        if cached is not None:
            return cached
    rules, errors = load_rules(dirs, params, severities)
    if folder is not None and key is not None:
        compiled = [_compile_rule(rule) for rule in rules]
        rules = [rule.with_compiled(code) if code else rule for rule, code in zip(rules, compiled, strict=True)]
        write_entry(folder, key, rules, errors)
    return rules, errors


# --- the key ------------------------------------------------------------------


def _engine_sources() -> list[str]:
    """The modules whose code decides what loading gives: ours and fastjsonschema's."""
    from gpuaudit import files, schemas
    from gpuaudit.engine import messages, rule_schemas
    from gpuaudit.kube import yaml_lines

    modules = (rules_module, rule_schemas, messages, schemas, files, yaml_lines, sys.modules[__name__])
    sources = [m.__file__ for m in modules if m.__file__]
    sandbox = find_spec("gpuaudit.engine.message_sandbox")  # judges a rich message; imports jinja2, so not imported
    if sandbox is not None and sandbox.origin:
        sources.append(sandbox.origin)
    library = find_spec("fastjsonschema")  # it writes the validators' code
    if library is not None and library.origin:
        sources += sorted(str(p) for p in Path(library.origin).parent.glob("*.py"))
    return sources


def cache_key(dirs: Sequence[Path], params: Mapping[str, Mapping[str, Any]], severities: Mapping[str, str]) -> str:
    """The hash of everything ``load_rules`` reads or depends on (the module's docstring)."""
    from gpuaudit import __version__
    from gpuaudit.bundled import policies_dir

    digest = blake2b(digest_size=32)

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    add("versions", f"{__version__} {sys.version} {sys.implementation.cache_tag}".encode())
    add("config", json.dumps([params, severities], sort_keys=True, default=repr).encode())
    for source in _engine_sources():
        add(source, _read(source))
    add("rule.schema.json", _read(policies_dir() / "rule.schema.json"))
    add(FACT_SCHEMA_PATH.name, _read(FACT_SCHEMA_PATH))
    for directory in dirs:
        add("dir", str(directory).encode())
        # The files load_rules reads; one it refuses (a link out of the
        # repository) is never read here either: its refusal is the key.
        paths, refused = rules_module.rule_files(directory)
        for error in refused:
            add("refused", str(error).encode())
        for path in paths:
            add(str(path), _read(path))
    return digest.hexdigest()


def _read(path: str | Path) -> bytes:
    """A file's bytes for the key: regular files only (a FIFO in a rule folder
    must not block the run), at most MAX_RULE_BYTES. Anything else gives a
    marker, so the key still changes with it; loading reports the problem."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return f"unreadable: {exc.errno}".encode()
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RULE_BYTES:
            return f"not read: mode {st.st_mode:o} size {st.st_size}".encode()
        chunks, size = [], 0
        while size <= MAX_RULE_BYTES and (chunk := os.read(fd, MAX_RULE_BYTES + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    except OSError as exc:
        return f"unreadable: {exc.errno}".encode()
    finally:
        os.close(fd)


# --- compiled validators --------------------------------------------------------


def _compile_rule(rule: Rule) -> dict[str, bytes] | None:
    """The marshalled code of each of the rule's schemas, or None when one
    cannot be compiled (the rule is then reported when it runs, as without a
    cache). Each is unmarshalled only when the rule is first used."""
    code = {}
    for key in ("match", "violation", "require"):
        schema = getattr(rule, key)
        if schema is None:
            continue
        try:
            code[key] = marshal.dumps(rules_module.schema_code(schema))
        except Exception:  # a defect of the rule's schema: evaluate() names it
            return None
    return code


# --- the entry ----------------------------------------------------------------


def checksum(payload: bytes) -> bytes:
    """What an entry carries to show its payload is whole (hex, ``_DIGEST`` bytes)."""
    return content_hash(payload).encode()


def _entry_path(folder: Path, key: str) -> Path:
    return folder / f"rules-{key[:32]}.bin"


def _private(st: os.stat_result) -> bool:
    """Owned by this user, writable by nobody else."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def read_entry(folder: Path, key: str) -> tuple[list[Rule], list[RuleError]] | None:
    """The cached rules and errors for ``key``, or None (absent, not this
    user's, not private, corrupt, or of another format)."""
    try:
        if not _private(os.stat(folder)):
            return None
        fd = os.open(_entry_path(folder, key), os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if not _private(st) or not stat.S_ISREG(st.st_mode):
                return None
            blob = handle.read()
    except OSError:
        return None
    head = len(_MAGIC)
    if blob[:head] != _MAGIC or len(blob) < head + _DIGEST + 1:
        return None
    digest, payload = blob[head : head + _DIGEST], blob[head + _DIGEST + 1 :]
    if checksum(payload) != digest:
        return None
    try:
        data = marshal.loads(payload)
        if data["key"] != key:
            return None
        rules = [_rule_from(item) for item in data["rules"]]
        errors = [RuleError(*item) for item in data["errors"]]
    except Exception:  # a well-formed file of another shape: never trusted
        return None
    with contextlib.suppress(OSError):  # used now: the last to be pruned
        os.utime(_entry_path(folder, key))
    return rules, errors


def _rule_from(item: Mapping[str, Any]) -> Rule:
    values = {name: item[name] for name in _RULE_FIELDS}
    compiled = item["compiled"]
    if not isinstance(compiled, dict) or not all(isinstance(c, bytes) for c in compiled.values()):
        raise ValueError("compiled validators are not marshalled code")
    return Rule(**values, compiled=compiled)


def write_entry(folder: Path, key: str, rules: Sequence[Rule], errors: Sequence[RuleError]) -> bool:
    """Write the entry atomically inside ``folder`` (made 0700 if missing);
    False when it cannot be written (no error: the next run compiles again)."""
    data = {
        "key": key,
        "rules": [
            {**{name: getattr(rule, name) for name in _RULE_FIELDS}, "compiled": dict(rule.compiled)} for rule in rules
        ],
        "errors": [(e.file, e.line, e.message, e.rule_id) for e in errors],
    }
    try:
        payload = marshal.dumps(data)
    except ValueError:  # a value marshal cannot hold: keep no entry
        return False
    blob = _MAGIC + checksum(payload) + b"\n" + payload
    tmp = None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(os.stat(folder)):
            return False
        import tempfile  # only when writing

        fd, tmp = tempfile.mkstemp(prefix=".rules-", suffix=".tmp", dir=folder)  # 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
        os.replace(tmp, _entry_path(folder, key))
        tmp = None
        _prune(folder)
    except OSError:
        return False
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return True


def _prune(folder: Path) -> None:
    """Keep the most recently used entries: a changed rule pack leaves its old
    one behind."""
    entries = []
    for path in folder.glob("rules-*.bin"):
        try:
            entries.append((path.stat().st_mtime, path))
        except OSError:
            continue
    for _, path in sorted(entries, reverse=True)[_KEEP:]:
        with contextlib.suppress(OSError):
            path.unlink()
