"""Agent Skills whose SKILL.md runs its tools as modules (`python -m scripts.X` from the
skill's root), as Anthropic's skill-creator does: a copy shaped like it is written here
(a `scripts/` package whose modules import each other as `scripts.<name>`), served
unmodified and run with runtime.skills.run_module and run_script('-m ...').
Also the guest's socket module: probing code gets the OSError it expects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.images import on_data

Rpc = Callable[..., dict[str, Any]]

VALIDATE = '''\
import sys
from pathlib import Path


def validate_skill(path):
    skill_md = Path(path) / "SKILL.md"
    if not skill_md.exists():
        return False, "SKILL.md not found"
    return True, "Skill is valid!"


if __name__ == "__main__":
    ok, message = validate_skill(sys.argv[1])
    print(message)
    sys.exit(0 if ok else 1)
'''
PACKAGE = '''\
import argparse
import sys
import zipfile
from pathlib import Path

from scripts.quick_validate import validate_skill
from .utils import label


def main():
    parser = argparse.ArgumentParser(prog="package_skill")
    parser.add_argument("skill_path")
    parser.add_argument("output_dir")
    args = parser.parse_args()
    ok, message = validate_skill(args.skill_path)
    if not ok:
        print(f"Validation failed: {message}", file=sys.stderr)
        sys.exit(1)
    out = Path(args.output_dir) / (Path(args.skill_path).name + ".skill")
    with zipfile.ZipFile(out, "w") as zf:
        for f in sorted(Path(args.skill_path).rglob("*")):
            if f.is_file():
                zf.write(f, f.relative_to(Path(args.skill_path).parent))
    print(label(out), __name__, __package__)


if __name__ == "__main__":
    main()
'''


@pytest.fixture()
def skills_dir(skills_dir: Path) -> Path:
    root = skills_dir / "skill-creator"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text(
        "---\nname: skill-creator\ndescription: Guide for creating effective skills.\nlicense: Complete terms\n---\n"
        "# Skill Creator\n\nPackage a skill:\n\n```bash\npython -m scripts.package_skill <path/to/skill-folder>\n```\n"
    )
    (root / "scripts" / "__init__.py").write_text("")
    (root / "scripts" / "quick_validate.py").write_text(VALIDATE)
    (root / "scripts" / "package_skill.py").write_text(PACKAGE)
    (root / "scripts" / "utils.py").write_text("def label(path):\n    return 'packaged ' + path.name\n")
    # A namespace package (no __init__.py), as some skills have.
    (root / "tools").mkdir()
    (root / "tools" / "hello.py").write_text("import sys\nprint('hello', *sys.argv[1:])\n")
    return skills_dir


def _run(rpc: Rpc, code: str) -> dict[str, Any]:
    answer = rpc("run_code", {"language": "python", "code": code, "mount_skills": ["skill-creator"],
                              "limits": {"timeout_ms": 30000}})
    assert "result" in answer, answer
    return answer["result"]


def test_scripts_run_as_modules_from_the_skill_root(rpc: Rpc) -> None:
    code = (
        "import os, zipfile\n"
        "from runtime import skills\n"
        "def main(args):\n"
        "    os.makedirs('/workspace/me/my-skill')\n"
        "    open('/workspace/me/my-skill/SKILL.md', 'w').write('---\\nname: my-skill\\n---\\n')\n"
        "    done = skills.run_module('skill-creator', 'scripts.package_skill',\n"
        "                             argv=['/workspace/me/my-skill', '/workspace'])\n"
        "    names = zipfile.ZipFile('/workspace/my-skill.skill').namelist()\n"
        "    same = skills.run_script('skill-creator', '-m scripts.quick_validate', argv=['/workspace/nope'])\n"
        "    ns = skills.run_module('skill_creator', 'tools.hello', argv=['there'])\n"
        "    return [done, names, same, ns]\n"
    )
    run = _run(rpc, code)
    assert run["status"] == "completed", run
    done, names, same, ns = run["output"]
    assert done == {"exit_code": 0, "stdout": "packaged my-skill.skill __main__ scripts\n", "stderr": ""}
    assert names == ["my-skill/SKILL.md"]
    assert same == {"exit_code": 1, "stdout": "SKILL.md not found\n", "stderr": ""}
    assert ns == {"exit_code": 0, "stdout": "hello there\n", "stderr": ""}


def test_commands_as_skill_md_writes_them(rpc: Rpc) -> None:
    code = (
        "import os\n"
        "from runtime import skills\n"
        "def main(args):\n"
        "    os.makedirs('/workspace/s')\n"
        "    open('/workspace/s/SKILL.md', 'w').write('x')\n"
        "    out = [skills.run_command('skill-creator', 'python -m scripts.quick_validate /workspace/s'),\n"
        "           skills.run_command('skill-creator', \"python3 ./tools/hello.py 'two words'\")]\n"
        "    for bad in ['bash -c ls', 'python', 'python -c 1', '']:\n"
        "        try:\n"
        "            skills.run_command('skill-creator', bad)\n"
        "        except ValueError as exc:\n"
        "            out.append(str(exc)[:40])\n"
        "    return out\n"
    )
    run = _run(rpc, code)
    assert run["status"] == "completed", run
    validated, hello, *refused = run["output"]
    assert validated == {"exit_code": 0, "stdout": "Skill is valid!\n", "stderr": ""}
    assert hello == {"exit_code": 0, "stdout": "hello two words\n", "stderr": ""}
    assert len(refused) == 4


def test_bad_module_names_are_clear(rpc: Rpc) -> None:
    code = (
        "from runtime import skills\n"
        "def main(args):\n"
        "    out = []\n"
        "    for name in ['../etc', 'scripts/x', '', 'scripts..x', 'a\\x00b']:\n"
        "        try:\n"
        "            skills.run_module('skill-creator', name)\n"
        "        except ValueError as exc:\n"
        "            out.append(str(exc))\n"
        "    missing = skills.run_module('skill-creator', 'scripts.nope')\n"
        "    return out, missing\n"
    )
    run = _run(rpc, code)
    assert run["status"] == "completed", run
    refused, missing = run["output"]
    assert len(refused) == 5 and all("must be dotted Python names" in r for r in refused)
    assert missing["exit_code"] == 1 and "No module named scripts.nope" in missing["stderr"]


def test_socket_probes_get_oserror(rpc: Rpc) -> None:
    code = (
        "import socket\n"
        "def main(args):\n"
        "    tried = []\n"
        "    for family in (socket.AF_UNIX, socket.AF_INET):\n"
        "        try:\n"
        "            s = socket.socket(family, socket.SOCK_STREAM)\n"
        "            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "        except OSError as exc:\n"
        "            tried.append(type(exc).__name__)\n"
        "    try:\n"
        "        socket.gethostbyname('example.com')\n"
        "    except OSError as exc:\n"
        "        tried.append(type(exc).__name__)\n"
        "    return tried, socket.gethostname()\n"
    )
    run = _run(rpc, code)
    assert run["status"] == "completed", run
    # The host name is each image's libc's: one of the differences docs/images.md lists.
    hostname = "(none)" if on_data() else "localhost"
    assert run["output"] == [["OSError", "OSError", "gaierror"], hostname]
