"""data.json.query: pick, filter, sort and project values of a JSON blob.

`main(args)` returns the result inline when it is small; otherwise a preview and
the id of a blob holding the full result (`result_blob`).
"""

from __future__ import annotations

import json
from typing import Any

from runtime import blobs, log

from .jsonpath import described, json_type, query
from .options import Options, parse_options
from .records import keep, project, sort_items
from .source import load_document

# The protocol wants `output` under 4 KB: results up to INLINE_BYTES of JSON are
# returned as they are, bigger ones go to a blob with a preview of PREVIEW_BYTES.
INLINE_BYTES = 2500
PREVIEW_BYTES = 1500
MAX_LABEL_CHARS = 80


def main(args: dict[str, Any]) -> dict[str, Any]:
    options = parse_options(args)
    document = load_document(options.blob_id)
    found = query(document, options.path)
    result = _transform(found, options)
    encoded = json.dumps(result, ensure_ascii=False)
    out: dict[str, Any] = {"summary": "", "type": json_type(result), "count": _count(result)}
    if isinstance(found, list):
        out["matched"] = len(found)
    if len(encoded.encode("utf-8")) <= INLINE_BYTES:
        out["result"] = result
        out["result_blob"] = None
    else:
        out["preview"] = _preview(result, encoded)
        out["result_blob"] = blobs.write_json(result)
    out["summary"] = _sentence(options, found, result, out["result_blob"])
    log.info(out["summary"])
    return out


def _transform(found: Any, options: Options) -> Any:
    """Apply filter, sort_by, limit and select, in that order."""
    if isinstance(found, list):
        items = keep(found, options.conditions) if options.conditions else found
        if options.sort_by is not None:
            items = sort_items(items, options.sort_by, options.descending)
        if options.limit is not None:
            items = items[: options.limit]
        if options.select is not None:
            items = [project(item, options.select) for item in items]
        return items
    where = _label(options)
    if options.needs_list:
        raise ValueError(
            f'"filter", "sort_by" and "limit" need an array, but {where} is {described(found)}; '
            f'to use the values of an object as records, add ".*" to the path'
        )
    if options.select is not None:
        if not isinstance(found, dict):
            raise ValueError(f'"select" needs an object or an array of objects, but {where} is {described(found)}')
        return project(found, options.select)
    return found


def _count(result: Any) -> int:
    """Elements of an array, keys of an object, 1 for a single value."""
    return len(result) if isinstance(result, (list, dict)) else 1


def _preview(result: Any, encoded: str) -> list[Any] | str:
    """The leading elements of an array that fit the preview budget, else the start of the JSON text."""
    if isinstance(result, list):
        shown: list[Any] = []
        size = 2
        for item in result:
            size += len(json.dumps(item, ensure_ascii=False).encode("utf-8")) + 2
            if size > PREVIEW_BYTES:
                break
            shown.append(item)
        if shown:
            return shown
    return _clip(encoded, PREVIEW_BYTES // 2)  # chars, not bytes: stay safe for non-ASCII


def _label(options: Options) -> str:
    if not options.path.steps:
        return "the document"
    return f"path {_clip(options.path.text, MAX_LABEL_CHARS)!r}"


def _sentence(options: Options, found: Any, result: Any, result_blob: str | None) -> str:
    label = _label(options)
    subject = label[0].upper() + label[1:]
    if isinstance(found, list):
        text = f"{subject} gave {_plural(len(found), 'item')}"
        if options.conditions or options.limit is not None:
            text += f"; {len(result):,} left after filter/limit"
    elif isinstance(result, dict):
        text = f"{subject} is an object with {_plural(len(result), 'key')}"
    else:
        text = f"{subject} is {described(result)}"
    if result_blob is not None:
        text += f"; full result in {result_blob}"
    return text + "."


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" + ("" if count == 1 else "s")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
