"""Reading YAML files a user wrote, strictly: the loaders and the field checks that topology
and workload files share.

PyYAML's safe loader keeps the last of a key given twice (silently dropping, say, a whole
``links:`` list) and expands aliases (so a small file can become a huge structure). These
loaders refuse both; :class:`FieldReader` checks the parsed mapping field by field, every
failure a :class:`SpecError` naming the file and the field path (``spec.links[3].to``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, NoReturn

import yaml

from cluster.errors import SpecError
from cluster.model.files import open_regular

SHOWN_CHARS = 60  # of a value quoted in a message
MAX_FILE_BYTES = 4 << 20  # of a topology or workload file: a typo should fail, not hang
SHOWN_PATH_CHARS = 200  # of a file's path in messages


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, except that a key given twice in one mapping is an
    error."""


class NoAliasLoader(UniqueKeyLoader):
    """:class:`UniqueKeyLoader` that also refuses aliases (``*name``)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "found an alias (*name): write the value out in full", mark)
        return super().compose_node(parent, index)


def _construct_map(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Iterator[Any]:
    """PyYAML's mapping constructor (a generator yielding the dict, filled afterwards), after
    refusing a key that the mapping gives twice."""
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = loader.construct_object(key_node)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"found the key {key!r} twice; keep one", key_node.start_mark)
            seen.add(key)
    yield from yaml.SafeLoader.construct_yaml_map(loader, node)


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)


def show(value: Any) -> str:
    """``repr(value)`` cut to SHOWN_CHARS characters, for messages (what the loaders
    return is small: files are at most MAX_FILE_BYTES and aliases are refused)."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 3] + "..."


def shown_path(file: str) -> str:
    """``file`` as messages name it: whole, or its start and end if very long."""
    if len(file) <= SHOWN_PATH_CHARS:
        return file
    return f"{file[:SHOWN_PATH_CHARS // 2]}…{file[-SHOWN_PATH_CHARS // 4:]}"


def read_text(file: str, what: str, hint: str = "") -> str:
    """The UTF-8 text of ``file`` (a ``what``: "topology", "workload"), at most
    MAX_FILE_BYTES (a larger file is refused unread); a SpecError naming the file
    otherwise, with ``hint`` if it is too large."""
    name = shown_path(file)
    try:
        with open_regular(file) as handle:
            size = os.fstat(handle.fileno()).st_size
            raw = handle.read(MAX_FILE_BYTES + 1) if size <= MAX_FILE_BYTES else b""
    except IsADirectoryError as err:
        raise SpecError(f"{name} is a directory: give the path of a {what} file") from err
    except OSError as err:
        raise SpecError(f"{name}: cannot read the {what} file ({err.strerror or err}); "
                        "check the path") from err
    if size > MAX_FILE_BYTES or len(raw) > MAX_FILE_BYTES:
        shown = f"{size:,} bytes" if size > MAX_FILE_BYTES else "more bytes than that"
        raise SpecError(f"{name}: the file is {shown}, over the {MAX_FILE_BYTES:,}-byte limit "
                        f"of a {what} file{hint}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{name}: not UTF-8 text (byte {err.start}): save the file as "
                        "UTF-8") from err


def parse_yaml(text: str, file: str, what: str) -> Any:
    """``text`` parsed strictly (:class:`NoAliasLoader`); a SpecError naming the file and
    the place for bad syntax, nesting too deep or a number too long to read."""
    try:
        return yaml.load(text, Loader=NoAliasLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise SpecError(f"{file}: not valid YAML{where}: {problem}; fix it there") from err
    except RecursionError as err:
        raise SpecError(f"{file}: the YAML is nested too deeply to be a {what}") from err
    except ValueError as err:  # e.g. an integer of more than 4,300 digits
        raise SpecError(f"{file}: a value cannot be read ({str(err)[:80]}); "
                        "write numbers of ordinary size") from err


class FieldReader:
    """Checks a parsed file field by field; every failure names the file and field path."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, path: str, problem: str) -> NoReturn:
        raise SpecError(f"{self.file}: {path or 'top level'}: {problem}")

    def fields(self, value: Any, path: str, required: tuple[str, ...],
               optional: tuple[str, ...] = (), note: str = "") -> dict[str, Any]:
        """A mapping with all of ``required`` and nothing outside ``required + optional``."""
        allowed = ", ".join(required + optional)
        if not isinstance(value, dict):
            self.fail(path, f"expected a mapping with the fields {allowed}, got {show(value)}")
        for key in value:
            if key not in required + optional:
                shown = str(key)[:SHOWN_CHARS]
                self.fail(f"{path}.{shown}" if path else shown,
                          f"unknown field{note}; allowed here: {allowed}")
        for key in required:
            if key not in value:
                self.fail(f"{path}.{key}" if path else key, "missing: this field is required")
        return value
