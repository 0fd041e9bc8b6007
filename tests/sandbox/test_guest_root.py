"""`/` and `/skills` can be listed in the guest: the mounts, and exactly the mounted skills."""

from __future__ import annotations

from tests.sandbox.conftest import make_skill

LIST = (
    "import os\n"
    "def main(args):\n"
    "    out = {}\n"
    "    for path in args['paths']:\n"
    "        try:\n"
    "            out[path] = sorted(os.listdir(path))\n"
    "        except OSError as exc:\n"
    "            out[path] = type(exc).__name__\n"
    "    return out\n"
)


def test_root_and_skills_list_the_mounts(run_code, tmp_path):
    skills = [
        make_skill(tmp_path, "alpha.one", {"code/main.py": "def main(args):\n    return 1\n"}),
        make_skill(tmp_path, "beta", {"SKILL.md": "just words\n"}, entrypoint=None),
    ]
    result = run_code(LIST, args={"paths": ["/", "/skills", "/skills/alpha.one", "/pycache/skills"]}, skills=skills)
    assert result.output == {
        "/": ["home", "lib", "mnt", "pycache", "skills", "tmp", "workspace"],
        "/skills": ["alpha.one", "beta"],
        "/skills/alpha.one": ["code"],
        "/pycache/skills": ["alpha.one"],
    }


def test_skills_is_empty_without_mounted_skills(run_code):
    result = run_code(LIST, args={"paths": ["/", "/skills", "/etc", "/.."]})
    assert result.output == {
        "/": ["home", "lib", "mnt", "skills", "tmp", "workspace"],
        "/skills": [],
        "/etc": "FileNotFoundError",
        "/..": "PermissionError",  # nothing above the root
    }


def test_the_root_is_read_only_and_leads_nowhere_else(run_code, tmp_path):
    skill = make_skill(tmp_path, "gamma", {"code/main.py": "def main(args):\n    return 1\n"})
    code = (
        "import os\n"
        "def main(args):\n"
        "    out = []\n"
        "    for action in (lambda: open('/new.txt', 'w'), lambda: os.mkdir('/skills/evil'),\n"
        "                   lambda: open('/skills/gamma2', 'w'), lambda: os.rmdir('/skills/gamma'),\n"
        "                   lambda: os.rename('/workspace', '/w2'), lambda: open('/../../etc/passwd'),\n"
        "                   lambda: os.symlink('/workspace', '/skills/link'),\n"
        "                   lambda: os.link('/skills/gamma/code/main.py', '/workspace/hard'),\n"
        "                   lambda: os.rename('/skills/gamma/code/main.py', '/workspace/moved')):\n"
        "        try:\n"
        "            action()\n"
        "            out.append('done')\n"
        "        except OSError:\n"
        "            out.append('refused')\n"
        "    walked = sorted(os.path.join(d, n) for d, dirs, files in os.walk('/skills') for n in dirs + files)\n"
        "    return out, walked\n"
    )
    result = run_code(code, skills=[skill])
    refused, walked = result.output
    assert refused == ["refused"] * 9
    assert walked == ["/skills/gamma", "/skills/gamma/code", "/skills/gamma/code/main.py"]
