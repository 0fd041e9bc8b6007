"""Running an Agent Skill's Python scripts inside the sandbox.

    from runtime import skills
    done = skills.run_script("pdf-tools", "scripts/extract.py", argv=["--pages", "1-3"])
    done["exit_code"], done["stdout"], done["stderr"]

There is no shell and no subprocess in the sandbox, so a script runs in this
interpreter, as `__main__`, the way `python scripts/extract.py ARGS` would run
it: its own `sys.argv`, stdin (`stdin=` text), stdout and stderr (captured and
returned), its folder first on `sys.path`. `sys.exit(n)` ends it with exit code
`n`; an uncaught exception ends it with exit code 1 and the traceback in
stderr. The skill must be mounted (run_code's `mount_skills`); it is found
under `/skills/<name>`, by its protocol name (`pdf_tools`) or its Agent Skill
name (`pdf-tools`). Only `.py` scripts can run.

`run_module("skill-creator", "scripts.package_skill", argv=[...])` is
`python -m scripts.package_skill ARGS` from the skill's root: the root first on
`sys.path`, the module (or a package's `__main__`) run as `__main__`, so a
script's relative imports (`from .utils import x`) and `scripts.utils` work.
`run_script` takes that form too: `run_script(skill, "-m scripts.package_skill")`,
and `run_command(skill, "python -m scripts.package_skill my-skill")` takes the
command line as the skill's SKILL.md writes it.
"""

from __future__ import annotations

import io
import os
import runpy
import sys
import traceback

SKILLS_ROOT = "/skills"


def skill_folder(skill: str) -> str:
    """The mounted folder of a skill, named either way (`pdf-tools` or `pdf_tools`)."""
    name = skill.replace("-", "_")
    folder = f"{SKILLS_ROOT}/{name}"
    if not name or "/" in name or name.startswith(".") or not os.path.isdir(folder):
        raise LookupError(f"skill {skill!r} is not mounted: add it to run_code's mount_skills")
    return folder


def _script_path(folder: str, path: str) -> str:
    parts = path.split("/")
    if not path or path.startswith("/") or "\0" in path or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"script path {path!r} must be relative to the skill's folder, without '..'")
    if not path.endswith(".py"):
        raise ValueError(f"{path!r} is not a Python script: only .py scripts run in the sandbox (no shell)")
    full = f"{folder}/{path}"
    if not os.path.isfile(full):
        raise FileNotFoundError(f"the skill has no script {path!r}")
    return full


def _exit_code(code: object, stderr: io.TextIOWrapper) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=stderr)  # as the interpreter does with sys.exit("message")
    return 1


def _module_name(name: str) -> str:
    parts = name.split(".")
    if not name or not all(part.isidentifier() for part in parts):
        raise ValueError(f"module name {name!r} must be dotted Python names, like scripts.package_skill")
    return name


def run_module(skill: str, module: str, argv: list[str] | tuple[str, ...] = (), stdin: str = "") -> dict:
    """`python -m <module> ARGS` from a mounted skill's root; {"exit_code", "stdout", "stderr"}."""
    folder = skill_folder(skill)
    return _run_main(folder, folder, _module_name(module), argv, stdin, as_module=True)


def run_script(skill: str, path: str, argv: list[str] | tuple[str, ...] = (), stdin: str = "") -> dict:
    """Run `path` of a mounted skill as a script; {"exit_code", "stdout", "stderr"}.
    `path` may also be `-m package.module` (see `run_module`)."""
    if path.startswith("-m"):
        return run_module(skill, path[2:].strip(), argv, stdin)
    folder = skill_folder(skill)
    full = _script_path(folder, path)
    return _run_main(folder, os.path.dirname(full), full, argv, stdin, as_module=False)


_PYTHONS = frozenset({"python", "python3", "python3.11", "py"})


def run_command(skill: str, command: str, stdin: str = "") -> dict:
    """A command line as a skill's SKILL.md writes it, run from the skill's root:
    `python -m scripts.package_skill ARGS` or `python scripts/extract.py ARGS`
    (`python3` too). There is no shell: anything else is a ValueError saying so."""
    import shlex

    words = shlex.split(command)
    if not words or words[0].rsplit("/", 1)[-1] not in _PYTHONS:
        raise ValueError(
            f"only `python -m module ...` or `python script.py ...` run in the sandbox (no shell): {command[:200]!r}"
        )
    if len(words) >= 3 and words[1] == "-m":
        return run_module(skill, words[2], words[3:], stdin)
    if len(words) >= 2 and not words[1].startswith("-"):
        return run_script(skill, words[1].removeprefix("./"), words[2:], stdin)
    raise ValueError(f"give a module (-m name) or a script path after python: {command[:200]!r}")


def _run_main(
    folder: str, first_path: str, target: str, argv: list[str] | tuple[str, ...], stdin: str, *, as_module: bool
) -> dict:
    """Run `target` (a file, or a module name) as `__main__` with its own argv and streams."""
    full = target if not as_module else f"{folder}/{target.replace('.', '/')}.py"
    # Text streams over bytes, as a process has: scripts use sys.stdin.buffer and
    # sys.stdout.buffer too.
    stdout, stderr = _capture(), _capture()
    saved = (sys.argv, sys.stdin, sys.stdout, sys.stderr, list(sys.path), set(sys.modules))
    sys.argv = [full, *(str(a) for a in argv)]
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
    sys.stdout, sys.stderr = stdout, stderr
    sys.path.insert(0, first_path)
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(full, run_name="__main__")
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc.code, stderr)
    except Exception:
        traceback.print_exc(file=stderr)
        code = 1
    finally:
        sys.argv, sys.stdin, sys.stdout, sys.stderr = saved[:4]
        sys.path[:] = saved[4]
        # Modules the script imported from its skill: fresh again for the next script.
        for name in set(sys.modules) - saved[5]:
            if _from_folder(sys.modules[name], folder + "/"):
                del sys.modules[name]
    return {"exit_code": code, "stdout": _text(stdout), "stderr": _text(stderr)}


def _from_folder(module: object, prefix: str) -> bool:
    """A module, package or namespace package (no __file__) loaded from `prefix`."""
    module_file = getattr(module, "__file__", None) or ""
    if module_file.startswith(prefix):
        return True
    return any(str(entry).startswith(prefix) for entry in list(getattr(module, "__path__", None) or ()))


def _capture() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)


def _text(stream: io.TextIOWrapper) -> str:
    """What the script wrote; bytes that are not UTF-8 come back as U+FFFD."""
    try:
        stream.flush()
    except ValueError:  # the script closed it
        pass
    raw = stream.buffer
    data = raw.getvalue() if not raw.closed else b""
    return data.decode("utf-8", errors="replace")
