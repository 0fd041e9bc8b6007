"""A run's secret values (its environment, the host-held network secrets) kept out of what it returns.

The values are replaced by their placeholders (egress/secrets.py) in the
logs, the error message and the output, and in the output streamed while it
runs (outstream.py is handed the same `redactor`).
"""

from __future__ import annotations

import msgspec

from wasmrun.egress.secrets import Redactor
from wasmrun.sandbox.contract import errors
from wasmrun.sandbox.contract.types import RunError, RunRequest, RunResult
from wasmrun.sandbox.guest import jsontext


def redactor(request: RunRequest) -> Redactor | None:
    """What replaces the run's secret values (environment or host-held) by their placeholders."""
    secrets = dict(request.env)
    if request.network is not None:
        secrets.update(request.network.host_secrets)
    if not secrets:
        return None
    redact = Redactor(secrets)
    return redact if redact else None


def redact_result(result: RunResult, request: RunRequest) -> None:
    """Secret values replaced by their placeholders in everything the run returns."""
    redact = redactor(request)
    if redact is None:
        return
    result.logs = redact.text(result.logs)
    # A picture's name is the guest's choice (images.add_images): it could spell a secret.
    result.images = [msgspec.structs.replace(i, name=redact.text(i.name)) for i in result.images]
    result.displays = [msgspec.structs.replace(d, data=redact.value(d.data)) for d in result.displays]
    if result.error is not None:
        result.error = RunError(result.error.type, redact.text(result.error.message))
    if redact.data(result.output_json) != result.output_json:
        if len(result.output_json) > jsontext.FULL_DECODE_BYTES:
            # Redacting means decoding: not for a value that large (its objects would cost the host ~30x).
            result.status, result.output_json = "failed", b"null"
            result.error = RunError(errors.INVALID_OUTPUT, errors.secret_in_large_output(jsontext.FULL_DECODE_BYTES))
            return
        # Redacted in the decoded value, not the text: a replacement must not break JSON escapes.
        result.output_json = msgspec.json.encode(redact.value(msgspec.json.decode(result.output_json)))
