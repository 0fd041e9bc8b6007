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
    " packages installed for this run (or its session) and the skills mounted in it. If it is a"
    " pure-Python package, install it, then import it again: `runtime.packages.install([{package!r}])`"
    " in Python, or `pip install {package}` as a command (run_command, a cell's `!pip install`); in a"
    " session later runs have it too. The server's operator can also add it for every run"
    " (`wasmrun packages add {package}`). A package that needs native code cannot be installed: write"
    " the code with the standard library. A mounted skill is imported as `skills.<name>` after"
    " listing it in run_code's mount_skills"
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
    " pypdf, PyYAML and more), the packages installed for this run (or its session) and the skills"
    " mounted in it. If it is a pure-Python package, install it, then import it again:"
    " `runtime.packages.install([{package!r}])` in Python, or `pip install {package}` as a command"
    " (run_command, a cell's `!pip install`); in a session later runs have it too. The server's operator"
    " can also add it for every run (`wasmrun packages add --image data {package}`). A package that"
    " needs native code cannot be installed: write the code with what is there. A mounted skill is"
    " imported as `skills.<name>` after listing it in run_code's mount_skills"
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
    "hint: the sandbox runs no processes (no subprocess, multiprocessing or os.system): do the step"
    " in Python in this run; shell commands run with run_command, and a pure-Python package is"
    " installed from Python with `runtime.packages.install(['NAME'])` (or `pip install NAME` as a"
    " command){image}"
)
HINT_SHELL_LINE = (
    "hint: `!` shell lines and `%` magics are IPython's, not Python: run_code takes Python only."
    " Run shell commands with run_command (E2B's and Jupyter's cells take `!cmd` and `%pip install`);"
    " from Python, install a pure-Python package with `runtime.packages.install(['NAME'])`{image}"
)
_PROCESS_MODULES = frozenset({"subprocess", "multiprocessing", "_multiprocessing", "_posixsubprocess", "pip"})
# os functions WASI's build lacks that mean "start or signal a process".
_PROCESS_FUNCTIONS = frozenset({
    "system", "fork", "forkpty", "execv", "execve", "execvp", "execl", "execlp", "spawnv", "spawnl",
    "posix_spawn", "posix_spawnp", "kill", "killpg", "waitpid", "wait", "pipe",
})


def _image_option() -> str:
    return "" if "numpy" not in sys.modules else " (the data stack is built in: numpy, pandas, matplotlib...)"


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
