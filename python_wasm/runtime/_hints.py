"""One line under a failed run's traceback telling a model what to do next, for the
errors a sandbox causes: a package that is not there, a skill not mounted, a blob not
listed, no network, no processes, shell lines and magics. Valid on CPython 3.11 and 3.15
(both images); `_boot._describe` adds it to the traceback."""

from __future__ import annotations

import os
import sys

import runtime.blobs
from runtime import _skills

# Modules whose errors mean "tried to reach the network" (under WASI even
# socket.getaddrinfo is missing: an AttributeError, not an OSError).
_NETWORK_MODULES = frozenset({
    "socket", "ssl", "urllib.request", "http.client", "smtplib", "ftplib", "imaplib", "poplib",
    "asyncio.base_events", "asyncio.selector_events", "asyncio.streams",
})
HINT_NO_NETWORK = (
    "hint: the sandbox has no sockets: HTTP(S) goes through runtime.http (or urllib.request),"
    " only to hosts this run is allowed (run_code: the operator's allowlist, none by default);"
    " otherwise pass data in through args or input_blobs"
)
HINT_THIRD_PARTY = (
    "hint: {module!r} is not installed in this sandbox, which has the Python standard library, the"
    " packages its operator added and the skills mounted in this run (no pip install from a run)."
    " If it is a pure-Python package, the server's operator can add it with"
    " `wasmrun packages add {package}`; otherwise write the code with the standard library."
    " A mounted skill is imported as `skills.<name>` after listing it in run_code's mount_skills"
)
# Import names whose distribution on the package index is named otherwise.
_DISTRIBUTIONS = {
    "yaml": "PyYAML", "dateutil": "python-dateutil", "PIL": "Pillow", "sklearn": "scikit-learn",
    "bs4": "beautifulsoup4", "docx": "python-docx", "pptx": "python-pptx", "cv2": "opencv-python",
    "dotenv": "python-dotenv", "jwt": "PyJWT", "magic": "python-magic", "Crypto": "pycryptodome",
    "attr": "attrs", "google.protobuf": "protobuf", "fitz": "PyMuPDF", "OpenSSL": "pyOpenSSL",
}
HINT_DATA_THIRD_PARTY = (  # on the data image (numpy is in its memory image)
    "hint: {module!r} is not installed in this sandbox, which has the Python standard library, the"
    " data stack (numpy, pandas, matplotlib, scipy, scikit-learn, statsmodels, Pillow, lxml, openpyxl,"
    " pypdf, PyYAML and more), the packages its operator added and the skills mounted in this run"
    " (no pip install from a run). If it is a pure-Python package, the server's operator can add it"
    " with `wasmrun packages add --image data {package}`; otherwise write the code with what is there."
    " A mounted skill is imported as `skills.<name>` after listing it in run_code's mount_skills"
)
HINT_SKILL_NOT_MOUNTED = (
    "hint: a skill is importable as skills.<name> only in a run that mounts it:"
    " list it in run_code's mount_skills (list_skills shows the names)"
)
HINT_BLOB = (
    "hint: a run can read only the blobs listed in its input_blobs (and blobs it wrote itself);"
    " add {blob!r} to input_blobs and run again"
)
# What a model tries first when a package is missing or a step "needs a shell".
HINT_NO_PROCESSES = (
    "hint: the sandbox runs no processes (no subprocess, shell, multiprocessing or pip):"
    " do the step in Python in this run; packages are added by the server's operator"
    " (`wasmrun packages add{image} NAME`), never from a run"
)
HINT_SHELL_LINE = (
    "hint: `!` shell lines and `%` magics are IPython's, not Python, and the sandbox has no shell:"
    " write the step in Python; packages are added by the server's operator"
    " (`wasmrun packages add{image} NAME`), not with pip from a run"
)
_PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "_multiprocessing", "_posixsubprocess", "pip"})
# os functions WASI's build lacks that mean "start or signal a process".
_PROCESS_FUNCTIONS = frozenset({
    "system", "fork", "forkpty", "execv", "execve", "execvp", "execl", "execlp", "spawnv", "spawnl",
    "posix_spawn", "posix_spawnp", "kill", "killpg", "waitpid", "wait", "pipe",
})


def _image_option() -> str:
    return " --image data" if "numpy" in sys.modules else ""


def _network_error(exc: BaseException) -> bool:
    if type(exc).__module__ == "runtime.http":
        return False  # the host's own answer (e.g. NetworkNotAllowed) names the rule itself
    if type(exc).__module__ in ("socket", "ssl", "urllib.error"):
        return True
    if not isinstance(exc, (OSError, AttributeError)):
        return False
    return _passes_through(exc, _NETWORK_MODULES)


def _passes_through(exc: BaseException, modules: frozenset[str]) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_globals.get("__name__") or ""
        if name in modules or name.partition(".")[0] in modules:
            return True
        tb = tb.tb_next
    return False


def _process_error(exc: BaseException) -> bool:
    if isinstance(exc, ModuleNotFoundError):
        return (exc.name or "").partition(".")[0] in _PROCESS_MODULES
    if isinstance(exc, AttributeError):
        return getattr(exc, "obj", None) is os and getattr(exc, "name", None) in _PROCESS_FUNCTIONS
    if isinstance(exc, OSError) and "does not support processes" in str(exc):
        return True
    # ProcessPoolExecutor, multiprocessing's pools, asyncio's subprocesses: each its own error.
    return isinstance(exc, (OSError, NotImplementedError, AttributeError, ImportError)) and _passes_through(
        exc, frozenset({"multiprocessing", "concurrent.futures.process", "asyncio.subprocess"})
    )


def _shell_line(exc: BaseException) -> bool:
    return isinstance(exc, SyntaxError) and (exc.text or "").lstrip()[:1] in ("!", "%")


def hint(exc: BaseException) -> str | None:
    """One line telling a model what to do next, for errors a sandbox causes."""
    if _shell_line(exc):
        return HINT_SHELL_LINE.format(image=_image_option())
    if _process_error(exc):
        return HINT_NO_PROCESSES.format(image=_image_option())
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        top = exc.name.partition(".")[0]
        if top == _skills.ROOT:
            return HINT_SKILL_NOT_MOUNTED
        if top not in sys.stdlib_module_names:
            third_party = HINT_DATA_THIRD_PARTY if "numpy" in sys.modules else HINT_THIRD_PARTY
            return third_party.format(module=top, package=_DISTRIBUTIONS.get(top, top))
        return None
    if isinstance(exc, runtime.blobs.BlobNotFound):
        return HINT_BLOB.format(blob=exc.args[0] if exc.args else "the blob id")
    if _network_error(exc):
        return HINT_NO_NETWORK
    return None
