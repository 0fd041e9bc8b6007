"""Turning the sandbox's `ExecutionResult` into the spec's run result.

- `output` stays under 4 KB serialized. A larger return value is stored as a
  blob (compact JSON, kind application/json) listed first in `output_blobs`,
  and `output` becomes this pointer:
      {"output_blob": "blob:…", "size_bytes": 51234,
       "kind": "application/json", "preview": "<first ~1 KB of the JSON>"}
- `logs_preview` stays under 2 KB: the head and the tail of the logs around a
  "[... N bytes of logs cut ...]" line. When it is cut, everything the run's
  output capture kept is stored as a text blob, `logs_blob`, so nothing
  printed within the output cap is lost.
- `summary` is the return value's own `summary` when it is a short one-line
  string; otherwise the runtime writes one.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from wasmrun import sandbox
from wasmrun.blobs.quota import BlobQuota
from wasmrun.blobs.sampling import text_head, text_tail
from wasmrun.blobs.store import LEGACY_OWNER, BlobStore
from wasmrun.protocol.types import Display, ExecutionResult, RunError, RunImage, RunUsage

MAX_OUTPUT_BYTES = 4096
OUTPUT_PREVIEW_BYTES = 1000
MAX_LOGS_PREVIEW_BYTES = 2048
LOGS_HEAD_BYTES = 1000
MAX_ERROR_BYTES = 4096
ERROR_HEAD_BYTES = 1000
MAX_SUMMARY_CHARS = 200


def needs_output_blob(result: sandbox.RunResult) -> bool:
    """Whether `to_spec_result` will store the output or the logs as a blob (and so do file I/O)."""
    if logs_are_cut(result):
        return True
    return result.status == "completed" and result.error is None and len(result.output_json) > MAX_OUTPUT_BYTES


def logs_are_cut(result: sandbox.RunResult) -> bool:
    # Cheap test first: a str never has more UTF-8 bytes than 4 per character.
    return result.logs_cut_bytes > 0 or (
        len(result.logs) * 4 > MAX_LOGS_PREVIEW_BYTES
        and len(result.logs.encode("utf-8", "surrogatepass")) > MAX_LOGS_PREVIEW_BYTES
    )


def _logs_blob(
    result: sandbox.RunResult, blobs: BlobStore, owner: str, quota: BlobQuota | None
) -> str | UnsetType:
    if not logs_are_cut(result):
        return UNSET
    data = result.logs.encode("utf-8", "replace")
    return blobs.create(data, "text/plain; charset=utf-8", run_id=result.run_id, owner=owner, quota=quota)


def _spec_usage(u: sandbox.Usage) -> RunUsage:
    # Named one by one: the sandbox may track more than the protocol promises.
    return RunUsage(
        cpu_ms=u.cpu_ms,
        peak_memory_bytes=u.peak_memory_bytes,
        blob_io_bytes=u.blob_io_bytes,
        instantiate_ms=u.instantiate_ms,
        run_ms=u.run_ms,
        total_ms=u.total_ms,
        prepared_ahead=u.prepared_ahead,
        http_requests=u.http_requests,
        http_bytes_out=u.http_bytes_out,
        http_bytes_in=u.http_bytes_in,
    )


def to_spec_result(
    result: sandbox.RunResult, blobs: BlobStore, owner: str = LEGACY_OWNER, quota: BlobQuota | None = None
) -> ExecutionResult:
    """Raises BlobQuotaExceeded when the output or logs blob would take `owner` over `quota`."""
    usage = _spec_usage(result.usage)
    logs = logs_preview(result.logs, result.logs_cut_bytes)
    logs_blob = _logs_blob(result, blobs, owner, quota)
    if result.status == "failed" or result.error is not None:
        error = result.error or sandbox.RunError("SandboxError", "the run failed")
        return ExecutionResult(
            status="failed",
            run_id=result.run_id,
            summary=failure_summary(error.type, error.message),
            output_blobs=list(result.output_blobs),
            logs_preview=logs,
            logs_blob=logs_blob,
            error=RunError(type=error.type, message=cut_middle(error.message, MAX_ERROR_BYTES, ERROR_HEAD_BYTES)),
            usage=usage,
            warnings=list(result.warnings) if result.warnings else UNSET,
            displays=_displays(result),
        )
    # The sandbox checked the JSON (jsontext.output_problem): it is passed on
    # as it is, never decoded and re-encoded, so big integers stay exact.
    encoded = result.output_json
    output: Any = msgspec.Raw(encoded)
    output_blobs = list(result.output_blobs)
    stored = len(encoded) > MAX_OUTPUT_BYTES
    if stored:
        pointer = blobs.create(encoded, "application/json", run_id=result.run_id, owner=owner, quota=quota)
        output_blobs.insert(0, pointer)
        output = {
            "output_blob": pointer,
            "size_bytes": len(encoded),
            "kind": "application/json",
            # Only the head is decoded (the output is valid UTF-8: only the cut can split a character).
            "preview": text_head(encoded[: 4 * OUTPUT_PREVIEW_BYTES].decode("utf-8", "ignore"), OUTPUT_PREVIEW_BYTES),
        }
    outline = _outline(encoded)
    summary = own_summary(outline) or completed_summary(
        outline, len(encoded), output_blobs, usage.total_ms, stored=stored
    )
    if result.displays:
        count = len(result.displays)
        summary += f" Showed {count} display{'s' if count != 1 else ''} (see displays)."
    if result.warnings:  # the summary is what a model reads first
        count = len(result.warnings)
        summary += f" {count} warning{'s' if count != 1 else ''} (see warnings): {_warning_gist(result.warnings)}."
    return ExecutionResult(
        status="completed",
        run_id=result.run_id,
        summary=summary,
        output=output,
        output_blobs=output_blobs,
        images=[RunImage(i.blob_id, i.kind, i.name) for i in result.images] or UNSET,
        logs_preview=logs,
        logs_blob=logs_blob,
        usage=usage,
        warnings=list(result.warnings) if result.warnings else UNSET,
        displays=_displays(result),
    )


def _displays(result: sandbox.RunResult) -> list[Display] | UnsetType:
    return [Display(data=d.data, main=d.main, blobs=d.blobs) for d in result.displays] or UNSET


def _warning_gist(warnings: list[str]) -> str:
    """What the warnings are about, in a few words, for the summary."""
    gists = []
    for warning in warnings:
        gist = (
            "NaN or missing values became null" if "written as null" in warning
            else "values with no JSON form became text" if "no JSON form" in warning
            else "displays were dropped" if "dropped" in warning
            else "the code likely misread the run contract"
        )
        if gist not in gists:
            gists.append(gist)
    return "; ".join(gists)


# The top level of an output, its items left as JSON text: enough for a summary
# without building a large output's objects.
_outline_decoder = msgspec.json.Decoder(
    dict[str, msgspec.Raw] | list[msgspec.Raw] | str | int | float | bool | None
)


# Values an outline is built for: beyond, the top level's items are not listed.
MAX_OUTLINE_VALUES = 10_000


class _LargeValue:
    """The top level of an output too large to outline: only its kind."""

    def __init__(self, kind: str) -> None:
        self.kind = kind


def _outline(encoded: bytes) -> Any:
    if not sandbox.value_count_at_most(encoded, MAX_OUTLINE_VALUES):
        # One Raw per item of a list of millions would cost the host ~50x the output.
        first = encoded.lstrip()[:1]
        return _LargeValue("an object" if first == b"{" else "a list" if first == b"[" else "a value")
    value = _outline_decoder.decode(encoded)
    if isinstance(value, dict) and isinstance(value.get("summary"), msgspec.Raw):
        value["summary"] = msgspec.json.decode(value["summary"])
    return value


def own_summary(output: Any) -> str | None:
    if not isinstance(output, dict):
        return None
    summary = output.get("summary")
    if not isinstance(summary, str):
        return None
    summary = summary.strip()
    return summary if 0 < len(summary) <= MAX_SUMMARY_CHARS and "\n" not in summary else None


def _describe(value: Any) -> str:
    if value is None:
        return "returned null"
    if isinstance(value, _LargeValue):
        return f"returned {value.kind} of more than {MAX_OUTLINE_VALUES} values"
    if isinstance(value, bool):
        return f"returned {'true' if value else 'false'}"
    if isinstance(value, dict):
        n = len(value)
        return f"returned an object with {n} key{'s' if n != 1 else ''}"
    if isinstance(value, list):
        n = len(value)
        return f"returned a list of {n} item{'s' if n != 1 else ''}"
    if isinstance(value, str):
        n = len(value)
        return f"returned a string of {n} character{'s' if n != 1 else ''}"
    text = repr(value)
    return f"returned {text}" if len(text) <= 40 else "returned a number"


def completed_summary(
    output: Any, size: int, output_blobs: list[str], total_ms: float, *, stored: bool
) -> str:
    parts = [f"Completed in {_ms(total_ms)}", _describe(output)]
    if stored:
        parts.append(f"the {size}-byte output was stored in {output_blobs[0]}")
        written = len(output_blobs) - 1
    else:
        written = len(output_blobs)
    if written:
        parts.append(f"wrote {written} blob{'s' if written != 1 else ''}")
    return "; ".join(parts) + "."


def failure_summary(error_type: str, message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    # A sandbox hint ("hint: ...") follows the exception's own last line.
    hint = lines.pop() if lines and lines[-1].startswith("hint: ") and len(lines) > 1 else ""
    last = lines[-1] if lines else ""
    reason = last if last.startswith(error_type) else f"{error_type}: {last}" if last else error_type
    summary = f"Failed: {reason}" + (f" ({hint})" if hint else "")
    return summary if len(summary) <= MAX_SUMMARY_CHARS else summary[: MAX_SUMMARY_CHARS - 1] + "…"


def _ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def logs_preview(logs: str, cut_bytes: int = 0) -> str:
    return cut_middle(logs, MAX_LOGS_PREVIEW_BYTES, LOGS_HEAD_BYTES, already_cut=cut_bytes, what="logs")


def cut_middle(
    text: str, max_bytes: int, head_bytes: int, *, already_cut: int = 0, what: str = "text"
) -> str:
    """`text` if it fits in `max_bytes` (UTF-8), else its head and tail around a marker."""
    size = len(text.encode("utf-8"))
    if size <= max_bytes:
        return text
    head = text_head(text, head_bytes)
    # The marker's length depends on the count; 20 digits is more than any count here.
    marker_room = len(f"\n[... {'9' * 20} bytes of {what} cut ...]\n")
    tail = text_tail(text, max_bytes - len(head.encode("utf-8")) - marker_room)
    omitted = size - len(head.encode("utf-8")) - len(tail.encode("utf-8")) + already_cut
    return f"{head}\n[... {omitted} bytes of {what} cut ...]\n{tail}"
