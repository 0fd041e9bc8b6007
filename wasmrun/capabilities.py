"""What this server offers a run, in words a model reads: the run contract, the
packages its guest can import, the blob folder, the limits with their defaults
and ceilings, the network. One source for the tool descriptions (tools.py) and
the generated part of the protocol guide, so neither is written by hand.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wasmrun.imagefacts import MAX_ADDED_NAMED, ImageFacts, image_facts
from wasmrun.limits import REQUESTABLE
from wasmrun.sandbox import LimitPolicy

# What a request's `limits` may name, the Limits field each sets, how many of
# that field's units one unit of the request is, and what it bounds (wasmrun/limits.py).
REQUESTABLE_LIMITS: dict[str, tuple[str, int, str]] = {
    limit.name: (limit.field, limit.scale, limit.help) for limit in REQUESTABLE
}

RUN_CONTRACT = (
    "Run contract: define `def main(args):` (args is the call's `args` object) and return a"
    " value, which becomes `output`; without main, the code runs as a script and the value of its"
    " last line, when that is an expression, is the output (as in a notebook cell). Values keep"
    " their labels in JSON (a Series as {label: value}, a DataFrame as {columns, index, data});"
    " NaN and infinities become null, and a value with no JSON form its text, each with a warning."
    " display(obj) and plt.show() add `displays` (text/plain, text/html tables, image/png charts),"
    " in order, the last expression's with main=true. print() goes to logs_preview, not output."
    " A result's `warnings` say when the contract was likely misread."
)
BLOBS = (
    "Blobs: each blob id in input_blobs is a read-only file at /blobs/<id> (open('/blobs/' +"
    " blob_id)); `from runtime import blobs`: blobs.read_text(id), blobs.write_text(text, kind),"
    " blobs.write_json(obj), blobs.write_bytes(data, kind) (each returns a new id, listed in"
    " output_blobs). /workspace is a writable scratch folder."
)
STATELESS = (
    "A run without session_id is stateless: a fresh interpreter, nothing kept from an earlier run"
    " (pass data again through args or blobs)."
)
SESSIONS = (
    "Sessions (state across runs, like notebook cells): create_session returns a session_id; each"
    " run_code with that session_id keeps globals, imports, /workspace and /tmp for the next (load a"
    " CSV once, then explore it in later runs). fork_session copies one, close_session ends it (idle"
    " sessions expire). A run stopped by a limit is undone; an exception is not."
)
# Standard modules named as examples, when the guest has them.
COMMON_STDLIB = (
    "json", "csv", "re", "math", "statistics", "datetime", "zoneinfo", "decimal", "collections",
    "itertools", "sqlite3", "zipfile", "gzip", "xml", "html", "email", "urllib", "hashlib", "base64",
)
MAX_NOTABLE_NAMED = 12
ON_DEMAND = "pure-Python packages install on demand where the operator allows (runtime.packages.install, pip install)"


def installed_text(image: ImageFacts) -> str:
    """What a run can import on `image`, in words a model reads."""
    common = [name for name in COMMON_STDLIB if name in image.modules]
    stdlib = f"CPython {image.python} with its standard library (e.g. {', '.join(common)})"
    if image.notable or image.built_in:
        named = ", ".join(f"{p.name} {p.version}" + (f" (import {p.module})" if p.module != p.name else "")
                          for p in image.notable[:MAX_NOTABLE_NAMED])
        rest = len(image.built_in) - min(len(image.notable), MAX_NOTABLE_NAMED)
        more = f" and {rest} more (load_skills_protocol_guide lists them)" if rest > 0 else ""
        packages = f"; packages: {named}{more}; {ON_DEMAND}"
    else:
        packages = f"; no third-party packages built in; {ON_DEMAND}"
    added = ""
    if image.added:
        names = ", ".join(f"{p.name} {p.version}" for p in image.added[:MAX_ADDED_NAMED])
        extra = f" and {len(image.added) - MAX_ADDED_NAMED} more" if len(image.added) > MAX_ADDED_NAMED else ""
        added = f"; added by this server's operator: {names}{extra}"
    return (
        f"Python: {stdlib}{packages}{added}; `runtime` (blobs, http, skills helpers);"
        " a mounted skill imports as skills.<name>."
    )


# What code notices on one image that the other does differently (docs/images.md has the table).
IMAGE_NOTES = {
    "data": (
        "On this image /blobs always exists (empty without input blobs), ctypes imports but every use"
        " raises OSError, and C code walking deeply nested data (json.dumps, repr, pickle) is bounded"
        " by the C stack as in CPython 3.15 (thousands of levels), not by sys.setrecursionlimit."
    ),
    "stdlib": "",
}
OTHER_IMAGE = {"data": ("stdlib", "without third-party packages"), "stdlib": ("data", "with numpy, pandas, matplotlib")}


def skills_python_text(image: ImageFacts) -> str:
    """Which Python skills run on here, and what a skill meant for both images keeps to."""
    other, other_packages = OTHER_IMAGE.get(image.name, ("", ""))
    if not other:
        return f"Skills run on CPython {image.python} here."
    other_python = image_facts(other).python
    oldest = min((image.python, other_python), key=lambda v: tuple(int(p) for p in v.split(".") if p.isdigit()))
    return (
        f"Skills run on CPython {image.python} here (the {image.name} image); wasmrun's {other} image runs"
        f" CPython {other_python} {other_packages}: a skill meant for both keeps to {oldest} syntax and imports"
        " numpy, pandas or matplotlib only where they are present."
    )


@dataclass(frozen=True)
class ServerFacts:
    """The facts of one server that its tool texts and guide state."""

    limits: LimitPolicy = field(default_factory=LimitPolicy)
    run_code_hosts: tuple[str, ...] = ()  # URL patterns run_code may reach (the operator's)
    image: ImageFacts = field(default_factory=lambda: image_facts("stdlib"))

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
        notes = IMAGE_NOTES.get(self.image.name, "")
        return installed_text(self.image) + (" " + notes if notes else "")

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
            RUN_CONTRACT, self.installed(), BLOBS, STATELESS, SESSIONS, self.network(), self.limits_text(),
        ))

    def execute_skill_description(self) -> str:
        return "\n".join((
            "Execute a skill's entrypoint (main(args) of its code) in a fresh sandbox; `output` is"
            " its return value.",
            skills_python_text(self.image), BLOBS, STATELESS, self.limits_text(),
        ))

    def guide_section(self, methods: tuple[str, ...] = ()) -> str:
        """The guide's generated part: this server's own facts (and the methods it answers)."""
        packages = ", ".join(self.image.modules)
        built_in = ", ".join(f"{p.name} {p.version}" for p in self.image.built_in)
        answered = f"Methods this server answers: {', '.join(methods)}." if methods else ""
        return "\n\n".join(part for part in (
            "## This server (generated from its configuration)",
            f"Image served: {self.image.name}. " + self.installed(),
            skills_python_text(self.image) + " The differences between the two images are one table in"
            " wasmrun's docs/images.md.",
            RUN_CONTRACT, STATELESS, SESSIONS, BLOBS, self.network(), self.limits_text(),
            "Errors: a failed run has error.type and error.message (with the Python traceback;"
            " Timeout and CPULimitExceeded say where the code was when it was stopped). A call"
            " with a bad parameter is JSON-RPC -32602 naming the field.",
            "Skill scripts: `from runtime import skills`; skills.run_script(name, 'scripts/x.py',"
            " argv=[...]) or skills.run_module(name, 'scripts.x', argv=[...]) (`python -m`"
            " from the skill's root) run an Agent Skill's scripts inside the sandbox;"
            " skills.run_command(name, 'python -m scripts.x ARGS') takes the command as its SKILL.md"
            " writes it.",
            f"Packages built into the image: {built_in}." if built_in else "",
            f"Importable top-level modules: {packages}.",
            answered,
        ) if part)


def facts_of(limits: LimitPolicy, run_code_hosts: Any = (), image: ImageFacts | None = None) -> ServerFacts:
    """A server's facts from its limit policy, its run_code network allowlist and the image it serves."""
    hosts = tuple(str(h) for h in run_code_hosts)
    return ServerFacts(limits=limits, run_code_hosts=hosts, image=image if image is not None else image_facts("stdlib"))
