"""Which engine a server runs: the image a choice names ("auto", "stdlib", "data") and the
SandboxEngine on it.

Above the engine (it builds one) and below pool/ (a worker process opens its engine here):
the images themselves (images/) know nothing of the engine that runs them.
"""

from __future__ import annotations

import logging
from pathlib import Path

from wasmrun.sandbox.contract.blobaccess import BlobAccess
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.images.dataimage import DataImage, image_state
from wasmrun.sandbox.images.names import IMAGES

logger = logging.getLogger(__name__)


class DataSandboxEngine(SandboxEngine):
    """A SandboxEngine on the data image."""

    def __init__(self, blobs: BlobAccess, workspace_root: Path | None = None, packages: Path | None = None) -> None:
        super().__init__(blobs, workspace_root=workspace_root, image=DataImage(packages))


def resolve_image(choice: str) -> str:
    """The image a server started with `choice` serves: "auto" is the data image when it
    is built (never built here: that takes minutes), else stdlib, with a log line saying why."""
    if choice != "auto":
        return choice
    not_ready = image_state()
    if not_ready is None:
        return "data"
    logger.warning(
        "serving the stdlib image: the data image is not ready (%s); `wasmrun images install data` makes it"
        " (minutes, once; a server with the data extra installed makes it in the background)", not_ready,
    )
    return "stdlib"


def make_engine(
    image: str, blobs: BlobAccess, workspace_root: Path | None = None, packages: Path | None = None
) -> SandboxEngine:
    """The engine for `image` ("auto", "stdlib" or "data"); `packages`: the operator's
    package layers (<data_dir>/packages; each image mounts its own Python's)."""
    image = resolve_image(image)
    if image == "data":
        return SandboxEngine(blobs, workspace_root=workspace_root, image=DataImage(packages))
    if image != "stdlib":
        raise ValueError(f"unknown image {image!r} (one of: {', '.join(IMAGES)})")
    return SandboxEngine(blobs, workspace_root=workspace_root, packages=packages)

