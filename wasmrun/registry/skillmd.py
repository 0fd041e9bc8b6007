"""SKILL.md: markdown with YAML frontmatter, read so that hostile YAML cannot hurt.

python-frontmatter finds the `---` fences; the YAML between them goes through
`BoundedLoader`, the safe loader with three more rules, because SKILL.md
comes from clients (create_skill) and from folders re-read at every start:

- no anchors or aliases: a few hundred bytes of nested aliases expand to
  gigabytes once constructed (the "billion laughs");
- at most `MAX_DEPTH` levels of nesting: PyYAML's composer recurses once per
  level, so depth is checked before it goes deeper;
- at most `MAX_FRONTMATTER_CHARS` of frontmatter: the pure-Python parser costs
  about a millisecond per kilobyte.

The result must be a mapping that JSON can carry. Every problem is a
`FrontmatterError` (a ValueError) saying what is wrong.
"""

from __future__ import annotations

from typing import Any

import msgspec
import yaml
from frontmatter.default_handlers import YAMLHandler
from yaml.composer import ComposerError
from yaml.nodes import Node

MAX_DEPTH = 32
MAX_FRONTMATTER_CHARS = 64 * 1024

_HANDLER = YAMLHandler()


class FrontmatterError(ValueError):
    pass


class BoundedLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """yaml.SafeLoader refusing anchors and aliases and nesting deeper than MAX_DEPTH.
    The scanner and parser do not recurse; the composer does, once per level."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: object) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise ComposerError(None, None, "aliases (*name) are not allowed", event.start_mark)
        if getattr(event, "anchor", None) is not None:
            raise ComposerError(None, None, "anchors (&name) are not allowed", event.start_mark)
        if self._depth >= MAX_DEPTH:
            raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", event.start_mark)
        self._depth += 1
        try:
            node: Node | None = super().compose_node(parent, index)
            return node
        finally:
            self._depth -= 1


def split(text: str) -> tuple[str | None, str]:
    """(the frontmatter's YAML, or None when there is none; the markdown body)."""
    text = text.strip()
    if not _HANDLER.detect(text):
        return None, text
    try:
        fm, body = _HANDLER.split(text)
    except ValueError:  # an opening fence without a closing one: no frontmatter
        return None, text
    return fm, body.strip()


def body(text: str) -> str:
    """SKILL.md without its frontmatter; the YAML is not parsed."""
    return split(text)[1]


def parse_frontmatter(text: str) -> dict[str, Any]:
    """SKILL.md's frontmatter as JSON-ready data ({} when there is none)."""
    fm, _ = split(text)
    if fm is None:
        return {}
    if len(fm) > MAX_FRONTMATTER_CHARS:
        raise FrontmatterError(f"the frontmatter is longer than {MAX_FRONTMATTER_CHARS} characters")
    try:
        metadata = yaml.load(fm, Loader=BoundedLoader)
    except yaml.YAMLError as exc:
        raise FrontmatterError(f"the frontmatter does not parse: {_problem(exc)}") from None
    except (ValueError, TypeError, OverflowError) as exc:  # a constructor on a bad value (a date)
        raise FrontmatterError(f"the frontmatter holds a bad value: {exc}") from None
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise FrontmatterError("the frontmatter must be a mapping")
    try:
        converted = msgspec.to_builtins(metadata, str_keys=True)
    except (TypeError, ValueError, msgspec.EncodeError) as exc:
        raise FrontmatterError(f"the frontmatter holds a value JSON cannot carry: {exc}") from None
    assert isinstance(converted, dict)
    return converted


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        where = f" (line {exc.problem_mark.line + 1})" if exc.problem_mark else ""
        return f"{exc.problem}{where}"
    text = str(exc).strip()
    return text.splitlines()[0] if text else "unknown error"
