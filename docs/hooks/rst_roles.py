"""griffe extension: the docstrings' reST habits rendered as the API reference's Markdown.

fedbench's docstrings cross-reference with Sphinx roles (``:class:`~fedbench.configs.RunConfig```,
``:func:`build_spec```), show examples as doctests (``>>> ...``) and end a line with ``::``
before a literal block. mkdocstrings renders docstrings as Markdown, where none of these
mean anything (a doctest's ``rec["results"]["final"]`` even reads as a link). Once the
``fedbench`` package is loaded, this extension rewrites every docstring:

- a role becomes a link to the object's reference entry where the reference documents it,
  else its name as code; a role naming a ``fedbench`` object that does not exist is a
  warning, which ``mkdocs build --strict`` turns into a failed build (a broken reference);
- a doctest becomes a ``pycon`` code block; a trailing ``::`` becomes ``:``;
- a definition list of names (``Method``'s hooks: a heading line, then lines
  ``  ``name``   what it is``) becomes a bold heading and a bulleted list, each name a link
  to its entry.
"""

from __future__ import annotations

import re

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const):`(?P<tilde>~?)(?P<target>[\w.]+)`")
DOCTEST = re.compile(r"(?:^|\n)((?:>>> .*(?:\n(?:>>>|\.\.\.) .*)*))")
LITERAL = re.compile(r"(\S)::$", re.MULTILINE)
DEFINITION = re.compile(r"^  ``(?P<name>\w+)``\s{2,}(?P<text>\S.*)$")
ROOT = "fedbench"


def resolve(obj: griffe.Object, target: str) -> str | None:
    """The full path ``target`` names in ``obj``'s scope (None: it names nothing there)."""
    if target == ROOT or target.startswith(ROOT + "."):
        return target
    first, _, rest = target.partition(".")
    try:
        full = obj.resolve(first)
    except griffe.NameResolutionError:
        return None
    return f"{full}.{rest}" if rest else full


def exists(collection: griffe.ModulesCollection, path: str) -> bool:
    """Whether ``path`` is an object of the loaded code, or a name its module exports
    lazily (``__all__`` without a definition: ``fedbench.run``)."""
    try:
        collection.get_member(path)
        return True
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        parent, _, name = path.rpartition(".")
        try:
            module = collection.get_member(parent)
        except (KeyError, ValueError):
            return False
        return isinstance(module, griffe.Module) and name in (module.exports or ())


def rewrite(obj: griffe.Object, text: str, collection: griffe.ModulesCollection) -> str:
    def role(m: re.Match) -> str:
        target = m["target"]
        title = target.rsplit(".", 1)[-1] if m["tilde"] else target
        full = resolve(obj, target)
        if full is None or not full.startswith(ROOT):  # another library's object (torch, ...)
            if full is None and "." not in target and obj.path.startswith(ROOT):
                griffe.logger.warning(f"{obj.path}: docstring names {target!r}, which is not defined there")
            return f"`{title}`"
        if not exists(collection, full):
            griffe.logger.warning(f"{obj.path}: docstring names {full!r}, which does not exist")
            return f"`{title}`"
        return f'<autoref identifier="{full}" optional><code>{title}</code></autoref>'

    text = DOCTEST.sub(lambda m: f"\n```pycon\n{m[1]}\n```", text)
    text = LITERAL.sub(r"\1:", text)
    return ROLE.sub(role, definition_lists(obj, text))


def definition_lists(obj: griffe.Object, text: str) -> str:
    """Headed blocks of ``  ``name``   text`` lines as Markdown lists (names of ``obj``'s
    members link to them)."""
    lines, out, in_list = text.split("\n"), [], False
    for i, line in enumerate(lines):
        m = DEFINITION.match(line)
        if m:
            name = m["name"]
            code = f"<code>{name}</code>"
            if name in obj.members:
                code = f'<autoref identifier="{obj.path}.{name}" optional>{code}</autoref>'
            out.append(f"- {code}: {m['text']}")
        elif i + 1 < len(lines) and DEFINITION.match(lines[i + 1]) and line.strip() and not line.startswith(" "):
            out += ["", f"**{line.strip()}**", ""]  # the heading of the list below
        else:
            if in_list and line.strip():
                out.append("")  # a paragraph after a list made here
            out.append(line)
        in_list = bool(m)
    return "\n".join(out)


def objects(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from objects(member)


class ReSTRoles(griffe.Extension):
    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        for obj in objects(pkg):
            if obj.docstring is not None:
                obj.docstring.value = rewrite(obj, obj.docstring.value, loader.modules_collection)
