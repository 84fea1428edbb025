"""YAML that remembers where each value came from.

Every mapping value and sequence item gets its line, keyed by JSON pointer, so
a finding (or an error in a rule or config file) can name the exact line.
Duplicate keys are recorded, and the expanded size of a document is bounded:
aliases can make a small file describe a huge object ("billion laughs").
"""

from __future__ import annotations

from typing import Any, ClassVar

import yaml

MAX_NODES_PER_DOCUMENT = 1_000_000  # after alias expansion: stops "billion laughs"
MAX_DEPTH = 200


_NOTHING = object()  # no value replaced (a key set once)


class YamlLimitError(ValueError):
    """A document nested too deep or expanding too far."""


try:  # libyaml's parser is several times faster; fall back where it is missing.
    _BaseLoader: type = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _BaseLoader = yaml.SafeLoader


class LineLoader(_BaseLoader):  # type: ignore[misc, valid-type]
    """The safe loader, made cheaper where libyaml calls back into Python for
    every node; safe loaders have no path resolvers, so the results are exact.

    - ``resolve``: each distinct plain scalar's tag is resolved once.
      Manifests repeat the same few hundred (``name``, ``image``, ``true``,
      ``1``), and resolving runs Python regexes. Other nodes get the default
      tag of their kind, which is all the base method does for them.
    - ``descend_resolver``/``ascend_resolver`` only serve path resolvers, so
      they do nothing here; builtins that do nothing (``{}.get(node, index)``,
      ``tuple()``; the composer ignores what they return) cost far less than
      Python methods: a fifth of composing time.

    Kubernetes reads YAML as 1.2 does where 1.1 guesses a base-60 number:
    ``1:20`` is the text "1:20" there, never 80, and so it is here.
    """

    _plain_tags: ClassVar[dict[str, str]] = {}
    _default_tags: ClassVar[dict[type, str]] = {
        yaml.ScalarNode: _BaseLoader.DEFAULT_SCALAR_TAG,
        yaml.SequenceNode: _BaseLoader.DEFAULT_SEQUENCE_TAG,
        yaml.MappingNode: _BaseLoader.DEFAULT_MAPPING_TAG,
    }
    descend_resolver = {}.get
    ascend_resolver = tuple

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is not yaml.ScalarNode or not implicit[0]:
            return self._default_tags[kind]
        tag = self._plain_tags.get(value)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if tag in _SEXAGESIMAL_TAGS and ":" in value:
                tag = _STR_TAG
            if len(self._plain_tags) < 100_000:  # bounded: inputs can be huge
                self._plain_tags[value] = tag
        return tag


def load_yaml_with_lines(text: str) -> tuple[Any, dict[str, int]]:
    """One YAML document and its pointer->line map (for rule and config files,
    so their errors can name the line)."""
    node = yaml.compose(text, Loader=LineLoader)
    if node is None:
        return None, {}
    builder = LineBuilder()
    return builder.build(node, "", 0), builder.lines


_constructor = yaml.constructor.SafeConstructor()
_STR_TAG = "tag:yaml.org,2002:str"
_SEXAGESIMAL_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
# Tags that ask PyYAML for a Python object (``!!python/object/apply:os.system``):
# never constructed; a reader reports them (LineBuilder.python_tags).
PYTHON_TAG_PREFIX = "tag:yaml.org,2002:python/"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _merge_into(value: dict[Any, Any], merged: Any, merged_keys: set[Any]) -> None:
    """Lays a merge key's mapping (or list of mappings) under ``value``, as
    YAML 1.1 merge keys say: a key already in ``value`` (written before
    ``<<:``) wins, and in ``<<: [*a, *b]`` the earlier mapping wins over the
    later. The keys it adds are recorded in ``merged_keys``: an explicit key
    after ``<<:`` may still override them."""
    for part in merged if isinstance(merged, list) else [merged]:
        if isinstance(part, dict):
            for k, v in part.items():
                if k not in value:
                    value[k] = v
                    merged_keys.add(k)


class LineBuilder:
    """Builds Python values from a composed YAML node, recording the line of
    every mapping value and sequence item, duplicate keys, and the expanded
    size (aliases can make a small file describe a huge object). Python
    tags (``!!python/object/apply:…``) are read as plain data and recorded
    with their line in ``python_tags``, for the reader to report."""

    def __init__(self) -> None:
        self.lines: dict[str, int] = {}
        # (key, line, whether it repeats the value it replaces) of each key a
        # mapping sets twice
        self.duplicates: list[tuple[str, int, bool]] = []
        self.python_tags: list[tuple[str, int]] = []
        self._built: dict[int, Any] = {}
        self._size: dict[int, int] = {}

    def build(self, node: yaml.Node, pointer: str, depth: int, line: int | None = None) -> Any:
        """``line``: where the field starts (its key's line for a mapping value)."""
        if depth > MAX_DEPTH:
            raise YamlLimitError(f"nesting deeper than {MAX_DEPTH} levels")
        known = self._built.get(id(node))
        if known is not None:  # an alias: share the value, as PyYAML does
            return known
        self.lines[pointer] = line if line is not None else node.start_mark.line + 1
        if node.tag.startswith(PYTHON_TAG_PREFIX) and not isinstance(node, yaml.ScalarNode):
            self.python_tags.append((node.tag, node.start_mark.line + 1))  # scalars: in _scalar
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, pointer, depth)
        if isinstance(node, yaml.SequenceNode):
            return self._sequence(node, pointer, depth)
        return self._scalar(node)

    # The two loops below run once per field of every manifest, so they avoid
    # per-node calls where they can: scalar children (most fields) are
    # converted inline instead of through build(), and the expanded size is
    # summed as the children are visited.

    def _mapping(self, node: yaml.MappingNode, pointer: str, depth: int) -> dict[Any, Any]:
        value: dict[Any, Any] = {}
        self._built[id(node)] = value
        lines, sizes = self.lines, self._size
        child_depth = depth + 1
        size = 1
        scalar_node = yaml.ScalarNode
        # Keys a merge (``<<:``) brought in and no explicit key has set yet:
        # an explicit key beside ``<<:`` overrides such a key (that is what
        # merge keys are for), so it is no duplicate. None until a merge.
        merged_keys: set[Any] | None = None
        for key_node, value_node in node.value:
            key_tag = key_node.tag
            if type(key_node) is scalar_node and key_tag == _STR_TAG:  # most keys: plain text
                key = token = key_node.value
                size += 1  # a scalar's size is 1 (only collections are recorded)
            else:
                size += sizes.get(id(key_node), 1)
                if key_tag == _MERGE_TAG:
                    merged = self._merge_value(value_node, pointer, child_depth)
                    size += sizes.get(id(value_node), 1)
                    if merged_keys is None:
                        merged_keys = set()
                    _merge_into(value, merged, merged_keys)
                    continue
                key = self._scalar(key_node) if isinstance(key_node, scalar_node) else None
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    key = str(key)
                token = str(key)
            key_line = key_node.start_mark.line + 1
            replaced = _NOTHING
            if key in value:
                if merged_keys and key in merged_keys:
                    merged_keys.discard(key)  # overrides the merged value; a second one is a duplicate
                else:
                    replaced = value[key]
            if "~" in token or "/" in token:
                token = token.replace("~", "~0").replace("/", "~1")
            child = f"{pointer}/{token}"
            if type(value_node) is scalar_node and child_depth <= MAX_DEPTH:
                lines[child] = key_line
                value[key] = value_node.value if value_node.tag == _STR_TAG else self._scalar(value_node)
                size += 1
            else:
                value[key] = self.build(value_node, child, child_depth, key_line)
                size += sizes.get(id(value_node), 1)
            if replaced is not _NOTHING:
                self.duplicates.append((str(key), key_line, replaced == value[key]))
        self._record_size(node, size)
        return value

    def _merge_value(self, node: yaml.Node, pointer: str, depth: int) -> Any:
        """A merge key's value (``<<: *a``, ``<<: [*a, *b]``), built with its
        lines kept aside: its own line and its list's items would otherwise be
        recorded at this mapping's pointer (``/data``, ``/data/0``), as if the
        mapping began at ``<<:`` and had keys ``0`` and ``1``."""
        lines = self.lines
        self.lines = {}
        try:
            return self.build(node, pointer, depth)
        finally:
            self.lines = lines

    def _sequence(self, node: yaml.SequenceNode, pointer: str, depth: int) -> list[Any]:
        items: list[Any] = []
        self._built[id(node)] = items
        lines, sizes = self.lines, self._size
        child_depth = depth + 1
        size = 1
        for i, item in enumerate(node.value):
            child = f"{pointer}/{i}"
            if isinstance(item, yaml.ScalarNode) and child_depth <= MAX_DEPTH:
                lines[child] = item.start_mark.line + 1
                items.append(item.value if item.tag == _STR_TAG else self._scalar(item))
                size += 1
            else:
                items.append(self.build(item, child, child_depth))
                size += sizes.get(id(item), 1)
        self._record_size(node, size)
        return items

    def _record_size(self, node: yaml.Node, size: int) -> None:
        self._size[id(node)] = size
        if size > MAX_NODES_PER_DOCUMENT:
            raise YamlLimitError(
                f"document expands to more than {MAX_NODES_PER_DOCUMENT:,} nodes (YAML aliases: a possible alias bomb)"
            )

    def _scalar(self, node: yaml.Node) -> Any:
        tag = node.tag
        if tag == "tag:yaml.org,2002:str":
            return node.value
        construct = _constructor.yaml_constructors.get(tag)
        if construct is None or not isinstance(node, yaml.ScalarNode):
            if tag.startswith(PYTHON_TAG_PREFIX):
                self.python_tags.append((tag, node.start_mark.line + 1))
            return node.value  # unknown tags (!Ref, !!python/...) stay plain text
        try:
            value = construct(_constructor, node)
        except (yaml.YAMLError, ValueError):
            return node.value
        if isinstance(value, (bytes, bytearray)):
            return node.value
        if not isinstance(value, (str, int, float, bool)) and value is not None:
            return str(value)  # timestamps and the like: keep them JSON-shaped
        return value
