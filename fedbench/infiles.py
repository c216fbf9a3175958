"""The one bounded reader of the files a user points fedbench at and of its own small files:
a ``--config``, a sweep preset, a device catalogue, a ``--model-config``, a claim or fixes
file, the ``list`` cache, a model folder's config files, the split-zip model's stamp.
Two kinds of file keep readers of their own: result records
(:func:`fedbench.records.read_record_file`: a regular file of at most 256 MiB, then the
schema) and data sets (:mod:`fedbench.tasks.record_files` and the tasks' loaders: not
size-bounded, a data set is as large as it is).

A file is read only when it is a regular file (a FIFO would block forever, ``/dev/zero``
never ends; neither is opened for reading: the file is opened without blocking and
checked before a byte is read) of at most ``limit`` bytes (:data:`MAX_BYTES` unless the
caller states less), UTF-8 text, and its parsed document nests at most :data:`MAX_DEPTH`
levels. YAML is read with :class:`StrictLoader` (duplicate keys and more than
:data:`MAX_YAML_ALIASES` aliases refused). Every problem is one
:class:`~fedbench.errors.UserError` line naming the file and what it is (``what``).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from fedbench.errors import UserError

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_YAML_ALIASES", "StrictLoader", "read_json", "read_text",
           "read_yaml", "yaml_error_line"]

#: the largest input file read (a preset of thousands of runs is a few hundred KB)
MAX_BYTES = 8 * 2**20
#: the deepest nesting of a parsed document (a config is 2-4 levels deep)
MAX_DEPTH = 32
#: YAML aliases (``*name``) a file may use: a few are handy, thousands are an expansion
#: bomb (417 bytes of nested aliases expand to hundreds of megabytes)
MAX_YAML_ALIASES = 100


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def read_text(path: str | os.PathLike, what: str, limit: int = MAX_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` of at most ``limit`` bytes; a UserError
    naming ``what`` for anything else (missing, a directory, FIFO, device or socket, larger,
    not UTF-8, unreadable)."""
    shown = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise UserError(f"{what} not found: {shown}") from None
    except ValueError:  # a NUL character in the name
        raise UserError(f"{what} {shown!r}: not a file name") from None
    except OSError as e:
        raise UserError(f"{what} {shown} cannot be read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UserError(f"{what} {shown} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise UserError(f"{what} {shown} is {st.st_size} bytes, more than the {limit} read")
        data = b""
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as e:
        raise UserError(f"{what} {shown} cannot be read: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise UserError(f"{what} {shown} is more than the {limit} bytes read")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{what} {shown} is not UTF-8 text (byte {e.start})") from None


def check_depth(doc: Any, what: str, limit: int = MAX_DEPTH) -> Any:
    """``doc`` if it nests at most ``limit`` levels (iteratively; a node shared through YAML
    aliases is walked once), else a UserError."""
    stack, seen = [(doc, 0)], set()
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, (dict, list)) or id(node) in seen:
            continue
        if depth >= limit:
            raise UserError(f"{what} is nested more than {limit} levels deep")
        seen.add(id(node))
        stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
        if isinstance(node, dict):
            stack.extend((k, depth + 1) for k in node if isinstance(k, tuple))
    return doc


def read_json(path: str | os.PathLike, what: str, limit: int = MAX_BYTES) -> Any:
    """The JSON document of the file ``path`` (bounded, see :func:`read_text`)."""
    text = read_text(path, what, limit)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{what} {path} is not valid JSON (line {e.lineno}: {e.msg})") from None
    except RecursionError:
        raise UserError(f"{what} {path} is nested too deeply") from None
    except ValueError as e:  # an integer literal beyond Python's digit limit
        raise UserError(f"{what} {path} is not readable JSON ({str(e).split(';')[0]})") from None
    return check_depth(doc, f"{what} {path}")


class StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys and more than
    :data:`MAX_YAML_ALIASES` aliases (PyYAML keeps the last duplicate silently)."""

    aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise yaml.constructor.ConstructorError(
                    None, None, f"more than {MAX_YAML_ALIASES} aliases (*name): refused", self.peek_event().start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:  # an unhashable key: SafeLoader's own error follows
                continue
            if dup:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def yaml_error_line(e: Exception) -> str:
    """``line N: problem`` of a YAML error (PyYAML's message spans several lines)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f"line {mark.line + 1}: " if mark is not None else ""
    what = getattr(e, "problem", None) or (str(e).splitlines() or ["bad YAML"])[0]
    return f"{where}{what}"


def read_yaml(path: str | Path, what: str, limit: int = MAX_BYTES) -> Any:
    """The YAML document at ``path`` (``what`` names it in messages: "config file",
    "sweep preset"), read bounded (:func:`read_text`, :data:`MAX_DEPTH`) and safely:
    duplicate keys and alias bombs refused; any problem one UserError line."""
    text = read_text(path, what, limit)
    try:
        doc = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise UserError(f"{what} {path} is not valid YAML: {yaml_error_line(e)}") from None
    except RecursionError:
        raise UserError(f"{what} {path} is nested too deeply") from None
    return check_depth(doc, f"{what} {path}")
