"""What this server offers a run, in words a model reads: the run contract, the
packages its guest can import, the blob folder, the limits with their defaults
and ceilings, the network. One source for the tool descriptions (tools.py) and
the generated part of the protocol guide, so neither is written by hand.
"""

from __future__ import annotations

import functools
import zipfile
from dataclasses import dataclass, field
from typing import Any

from wasmrun.limits import REQUESTABLE
from wasmrun.sandbox.limits import LimitPolicy

# What a request's `limits` may name, the Limits field each sets, how many of
# that field's units one unit of the request is, and what it bounds (wasmrun/limits.py).
REQUESTABLE_LIMITS: dict[str, tuple[str, int, str]] = {
    limit.name: (limit.field, limit.scale, limit.help) for limit in REQUESTABLE
}

RUN_CONTRACT = (
    "Run contract: define `def main(args):` (args is the call's `args` object) and return a"
    " JSON-serialisable value, which becomes `output`; without main, the code runs as a script"
    " and the value of its last line, when that is an expression, is the output (as in a notebook"
    " cell). print() goes to logs_preview, not output. A result's `warnings` say when the"
    " contract was likely misread."
)
BLOBS = (
    "Blobs: each blob id in input_blobs is a read-only file at /blobs/<id> (open('/blobs/' +"
    " blob_id)); `from runtime import blobs`: blobs.read_text(id), blobs.write_text(text, kind),"
    " blobs.write_json(obj), blobs.write_bytes(data, kind) (each returns a new id, listed in"
    " output_blobs). /workspace is a writable scratch folder."
)
STATELESS = (
    "Every run is stateless: a fresh interpreter, nothing kept from an earlier run (pass data"
    " again through args or blobs)."
)
# Guest packages not worth naming to a model: private, test and build helpers.
_UNLISTED = frozenset({"runtime", "this", "antigravity", "pydoc", "idlelib", "lib2to3", "sitecustomize"})


@functools.lru_cache(maxsize=4)
def guest_packages(zip_path: str) -> tuple[str, ...]:
    """The top-level modules and packages the guest can import, read from its library zip."""
    names: set[str] = set()
    try:
        with zipfile.ZipFile(zip_path) as zf:
            for entry in zf.namelist():
                top = entry.split("/", 1)[0]
                name = top[:-3] if top.endswith((".py", ".pyc")) else top
                name = name.removesuffix(".py")
                if name.isidentifier() and not name.startswith("_") and name not in _UNLISTED:
                    names.add(name)
    except (OSError, zipfile.BadZipFile):
        return ()
    return tuple(sorted(names))


def _this_guest_packages() -> tuple[str, ...]:
    from python_wasm import build as guest_build

    guest = guest_build.find_guest()
    return guest_packages(str(guest.zip_path)) if guest is not None else ()


# Third-party packages a model most often expects; named when the guest has them.
NOTABLE = ("numpy", "pandas", "matplotlib", "openpyxl", "pypdf", "PIL", "requests", "scipy", "yaml")


# Standard modules named as examples, when the guest has them.
COMMON_STDLIB = (
    "json", "csv", "re", "math", "statistics", "datetime", "zoneinfo", "decimal", "collections",
    "itertools", "sqlite3", "zipfile", "gzip", "xml", "html", "email", "urllib", "hashlib", "base64",
)


@dataclass(frozen=True)
class ServerFacts:
    """The facts of one server that its tool texts and guide state."""

    limits: LimitPolicy = field(default_factory=LimitPolicy)
    run_code_hosts: tuple[str, ...] = ()  # URL patterns run_code may reach (the operator's)
    packages: tuple[str, ...] = field(default_factory=_this_guest_packages)

    def limit_bounds(self) -> dict[str, tuple[int, int, int]]:
        """Each requestable limit's lowest value, default and ceiling, in the request's units."""
        bounds = {}
        for member, (name, unit, _) in REQUESTABLE_LIMITS.items():
            lowest, highest = self.limits.allowed(name)
            default = max(lowest, min(int(getattr(self.limits.defaults, name)), highest))
            bounds[member] = (-(-lowest // unit), default // unit, highest // unit)
        return bounds

    def limits_schema(self) -> dict[str, Any]:
        properties = {
            member: {
                "type": "integer",
                "minimum": lowest,
                "maximum": ceiling,
                "description": f"{REQUESTABLE_LIMITS[member][2]}; default {default}, at most {ceiling}",
            }
            for member, (lowest, default, ceiling) in self.limit_bounds().items()
        }
        return {
            "type": "object",
            "properties": properties,
            "additionalProperties": False,
            "description": "What the run may use; omitted members take the server's default",
        }

    def installed(self) -> str:
        third_party = [name for name in NOTABLE if name in self.packages]
        extra = f" plus {', '.join(third_party)}" if third_party else " and no third-party packages (no pip install)"
        common = [name for name in COMMON_STDLIB if name in self.packages]
        return (
            f"Installed: CPython 3.11's standard library ({len(self.packages)} importable top-level"
            f" modules, e.g. {', '.join(common)}){extra}; `runtime` (blobs, http, skills helpers);"
            " a mounted skill imports as skills.<name>."
        )

    def network(self) -> str:
        if not self.run_code_hosts:
            return (
                "Network: none for run_code on this server. A skill reaches only the hosts its"
                " manifest's permissions.network requests and the operator grants (execute_skill)."
            )
        return (
            f"Network: run_code may reach {', '.join(self.run_code_hosts[:10])} through runtime.http"
            " or urllib.request (no sockets); a skill only what its manifest requests and the operator grants."
        )

    def limits_text(self) -> str:
        parts = [f"{m} {d} (max {c})" for m, (_, d, c) in self.limit_bounds().items()]
        return "Limits (default, max): " + ", ".join(parts) + "."

    def run_code_description(self) -> str:
        return "\n".join((
            "Execute LLM-written Python in a fresh sandbox, with the listed skills and blobs mounted.",
            RUN_CONTRACT, self.installed(), BLOBS, STATELESS, self.network(), self.limits_text(),
        ))

    def execute_skill_description(self) -> str:
        return "\n".join((
            "Execute a skill's entrypoint (main(args) of its code) in a fresh sandbox; `output` is"
            " its return value.",
            BLOBS, STATELESS, self.limits_text(),
        ))

    def guide_section(self, methods: tuple[str, ...] = ()) -> str:
        """The guide's generated part: this server's own facts (and the methods it answers)."""
        packages = ", ".join(self.packages)
        answered = f"Methods this server answers: {', '.join(methods)}." if methods else ""
        return "\n\n".join(part for part in (
            "## This server (generated from its configuration)",
            RUN_CONTRACT, STATELESS, BLOBS, self.network(), self.limits_text(),
            "Errors: a failed run has error.type and error.message (with the Python traceback;"
            " Timeout and CPULimitExceeded say where the code was when it was stopped). A call"
            " with a bad parameter is JSON-RPC -32602 naming the field.",
            "Skill scripts: `from runtime import skills`; skills.run_script(name, 'scripts/x.py',"
            " argv=[...]) or skills.run_module(name, 'scripts.x', argv=[...]) (`python -m`"
            " from the skill's root) run an Agent Skill's scripts inside the sandbox;"
            " skills.run_command(name, 'python -m scripts.x ARGS') takes the command as its SKILL.md"
            " writes it.",
            f"Importable top-level modules: {packages}.",
            answered,
        ) if part)


def facts_of(limits: LimitPolicy, run_code_hosts: Any = ()) -> ServerFacts:
    """A server's facts from its limit policy and its run_code network allowlist."""
    return ServerFacts(limits=limits, run_code_hosts=tuple(str(h) for h in run_code_hosts))
