"""The shape of a claim file (``leaderboard/claims/<paper>.yaml``) and of ``fixes.yaml``,
checked on the YAML's nodes before anything is read from them, so a problem is one
:class:`~fedbench.errors.UserError` line naming the file, the line and the key: a list where
a mapping belongs, ``blocks: 5``, a null group, an unknown key, a ``command`` naming a field
no group's ``where`` gives.

A spec is a Python value: ``dict`` (a mapping with these keys; a key ending in ``?`` may be
absent), ``[spec]`` (a list of items of that spec), ``("map", key_spec, value_spec)``, or
one of the scalar kinds ``"str"``, ``"scalar"`` (string or number), ``"figure"`` (number or
null), ``"text?"`` (string or null). Read through :func:`fedbench.infiles.read_text`.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import yaml

from fedbench.errors import UserError, shown
from fedbench.infiles import StrictLoader, read_text, yaml_error_line

__all__ = ["CLAIMS", "FIXES", "check_file"]

_GROUP = {"roc": "scalar", "figures": ("map", "str", ["figure"]), "where?": ("map", "str", "any"),
          "notes?": ("map", "str", "text?"), "paper_group?": "scalar",
          "explained_by?": ("map", "str", {"kind": "str", "text": "str", "measured_by?": "text?",
                                           "ablations?": [{"factor": "str", "settings": ["scalar"],
                                                           "arm": ("map", "str", "any"), "methods?": ["str"],
                                                           "command?": "text?", "against?": "str"}]})}
_BLOCK = {"table": "scalar", "task": "str", "method": "str", "columns": ("map", "scalar", "scalar"),
          "groups": [_GROUP], "claim?": "text?", "not_testable?": "text?", "command?": "text?",
          "figure_note?": "str"}
#: a claim file: paper, title and its blocks
CLAIMS = {"paper": "str", "title?": "str", "blocks": [_BLOCK]}
#: fixes.yaml: the corrections after which older records no longer show a method's behaviour
FIXES = {"fixes": [{"commit": "str", "committed_at": "str", "what": "str", "methods?": ["str"],
                    "settings?": ["str"]}]}

_SCALARS = {"str": ("str",), "scalar": ("str", "int", "float"), "figure": ("int", "float", "null"),
            "text?": ("str", "null"), "any": None}
_TAGS = {"tag:yaml.org,2002:str": "str", "tag:yaml.org,2002:int": "int", "tag:yaml.org,2002:float": "float",
         "tag:yaml.org,2002:null": "null", "tag:yaml.org,2002:bool": "bool"}


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.MappingNode):
        return "a mapping"
    if isinstance(node, yaml.SequenceNode):
        return "a list"
    kind = _TAGS.get(node.tag, "")
    if kind in ("int", "float"):
        return shown(node.value)[1:-1]  # the number as written
    return {"null": "null", "bool": "true/false"}.get(kind, shown(node.value))


class _Checker:
    def __init__(self, path: Path, what: str):
        self.path, self.what = path, what

    def fail(self, node: yaml.Node, where: str, problem: str) -> UserError:
        at = f"{where}: " if where else ""  # the document itself has no name to give
        return UserError(f"{self.what} {self.path} line {node.start_mark.line + 1}: {at}{problem}")

    def check(self, node: yaml.Node, spec: Any, where: str) -> None:
        if isinstance(spec, dict):
            self.mapping(node, spec, where)
        elif isinstance(spec, list):
            if not isinstance(node, yaml.SequenceNode):
                raise self.fail(node, where, f"expected a list, got {_kind(node)}")
            for i, item in enumerate(node.value):
                self.check(item, spec[0], f"{where}[{i + 1}]")
        elif isinstance(spec, tuple):
            if not isinstance(node, yaml.MappingNode):
                raise self.fail(node, where, f"expected a mapping, got {_kind(node)}")
            for k, v in node.value:
                self.check(k, spec[1], f"{where} key")
                self.check(v, spec[2], f"{where}.{k.value if isinstance(k, yaml.ScalarNode) else '?'}")
        elif _SCALARS[spec] is not None:
            kind = _TAGS.get(node.tag) if isinstance(node, yaml.ScalarNode) else None
            if kind not in _SCALARS[spec]:
                want = {"str": "a string", "scalar": "a string or number", "figure": "a number or null",
                        "text?": "a string or null"}[spec]
                raise self.fail(node, where, f"expected {want}, got {_kind(node)}")

    def mapping(self, node: yaml.Node, spec: dict, where: str) -> None:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, where, f"expected a mapping, got {_kind(node)}")
        keys = {k.rstrip("?"): k.endswith("?") for k in spec}
        given = {}
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else None
            if name not in keys:
                raise self.fail(k, where, f"unknown key {shown(name)} (valid: {', '.join(keys)})")
            given[name] = v
        missing = [k for k, optional in keys.items() if not optional and k not in given]
        if missing:
            raise self.fail(node, where, f"missing {missing[0]!r}")
        for name, v in given.items():
            self.check(v, spec[name + "?" if keys[name] else name], f"{where}.{name}" if where else name)


def _command_fields(checker: _Checker, doc: yaml.Node) -> None:
    """A block's ``command`` may name only {a}, {b}, {setting}, {roc} and fields every
    group's ``where`` gives."""
    blocks = next(v for k, v in doc.value if k.value == "blocks")
    for bi, block in enumerate(blocks.value):
        fields = {k.value: v for k, v in block.value}
        command = fields.get("command")
        if command is None or _TAGS.get(command.tag) != "str":
            continue
        try:
            named = {f for _, f, _, _ in string.Formatter().parse(command.value) if f is not None}
        except ValueError as e:
            raise checker.fail(command, f"blocks[{bi + 1}].command", f"not a command template ({e})") from None
        groups = fields["groups"].value
        wheres = [{k.value for k, _ in next((v.value for k, v in g.value if k.value == "where"
                                             and isinstance(v, yaml.MappingNode)), [])} for g in groups]
        given = {"a", "b", "setting", "roc"} | (set.intersection(*wheres) if wheres else set())
        unknown = sorted(named - given)
        if unknown:
            raise checker.fail(command, f"blocks[{bi + 1}].command",
                               f"names {{{unknown[0]}}}, which not every group's 'where' gives "
                               f"(known: {', '.join(sorted(given))})")


def check_file(path: str | Path, spec: dict, what: str) -> None:
    """Check the YAML file ``path`` against ``spec`` (:data:`CLAIMS` or :data:`FIXES`)."""
    checker = _Checker(Path(path), what)
    text = read_text(path, what)
    try:
        doc = yaml.compose(text, Loader=StrictLoader)
    except yaml.YAMLError as e:
        raise UserError(f"{what} {path} is not valid YAML: {yaml_error_line(e)}") from None
    except RecursionError:
        raise UserError(f"{what} {path} is nested too deeply") from None
    if doc is None:
        raise UserError(f"{what} {path} is empty")
    checker.check(doc, spec, "")
    if spec is CLAIMS:
        _command_fields(checker, doc)
