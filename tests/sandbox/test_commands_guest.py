"""The shell inside the guest (issue 43): `runtime.commands.run` driven through real runs.

Every test runs code in the sandbox that calls `commands.run(...)` and checks what a
user sees: the exit code, stdout and stderr (kept apart by swapping sys.stdout/stderr
around the call in the guest), or the run's own logs. `make test` runs this file on
both images (tests/images.py; WASMRUN_TEST_IMAGE=data: only the data image).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.conftest import POLICY
from wasmrun.sandbox.contract.types import RunRequest, RunResult, SessionRun
from wasmrun.sandbox.engine import SandboxEngine
from wasmrun.sandbox.guest.jsontext import encode_args

# Both images (tests/images.py); with the older conftest, WASMRUN_TEST_IMAGE=data picks the data image.
pytestmark = pytest.mark.images("stdlib", "data")

# Runs each command line of args["cmds"] ([command, keyword arguments]) in turn, in one
# run, and returns [exit code, stdout, stderr] for each.
BATCH = """
import io, sys
from runtime import commands

def main(args):
    results = []
    for command, kwargs in args["cmds"]:
        if "stdin_hex" in kwargs:  # bytes (JSON has no bytes)
            kwargs["stdin"] = bytes.fromhex(kwargs.pop("stdin_hex"))
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            code = commands.run(command, **kwargs)
        finally:
            sys.stdout, sys.stderr = saved
        results.append([code, out.getvalue(), err.getvalue()])
    return results
"""


def _run(engine: SandboxEngine, code: str, args: dict[str, Any] | None = None, **limits: int) -> RunResult:
    return engine.run(RunRequest(kind="code", code=code, function="main", args_json=encode_args(args or {}),
                                 limits=POLICY.resolve(**limits)))


Command = str | list[str] | tuple[Any, dict[str, Any]]
Outcome = tuple[int, str, str]


def shell(engine: SandboxEngine, *cmds: Command, **limits: int) -> list[Outcome]:
    """Each command line in one run; (exit code, stdout, stderr) each."""
    batch = [list(c) if isinstance(c, tuple) else [c, {}] for c in cmds]
    result = _run(engine, BATCH, {"cmds": batch}, **{"timeout_ms": 60_000, **limits})
    assert result.status == "completed", result.error
    return [tuple(r) for r in result.output]  # type: ignore[misc]


def one(engine: SandboxEngine, cmd: str | list[str], **kwargs: Any) -> Outcome:
    return shell(engine, (cmd, kwargs))[0]


# -- syntax ------------------------------------------------------------------------

SYNTAX = [
    ("echo hello world", 0, "hello world\n"),
    ("echo a | tr a-z A-Z", 0, "A\n"),
    ("printf 'c\\nb\\na\\n' | sort | head -n 2", 0, "a\nb\n"),
    ("true && echo yes || echo no", 0, "yes\n"),
    ("false && echo yes || echo no", 0, "no\n"),
    ("echo one; echo two", 0, "one\ntwo\n"),
    ("false; echo $?", 0, "1\n"),
    ("x=5; y=$((x * 3)); echo $y", 0, "15\n"),
    ("echo \"$(echo inner) and `echo back`\"", 0, "inner and back\n"),
    ("echo 'single $HOME' \"double\"  spaced", 0, "single $HOME double spaced\n"),
    ("a='x  y'; echo \"$a\"; echo $a", 0, "x  y\nx y\n"),
    ("cat <<EOF\nline $((1+1))\nEOF", 0, "line 2\n"),
    ("cat <<'EOF'\nliteral $HOME\nEOF", 0, "literal $HOME\n"),
    ("cat <<< 'herestring'", 0, "herestring\n"),
    ("for i in 1 2 3; do printf $i; done; echo", 0, "123\n"),
    ("i=0; while [ $i -lt 3 ]; do i=$((i+1)); done; echo $i", 0, "3\n"),
    ("case abc in a*) echo starts-a;; *) echo other;; esac", 0, "starts-a\n"),
    ("if [ -z \"\" ]; then echo empty; else echo not; fi", 0, "empty\n"),
    ("echo {1..4} {x,y}z", 0, "1 2 3 4 xz yz\n"),
    ("arr=(p q r); echo ${arr[1]} ${#arr[@]}", 0, "q 3\n"),
    ("s=hello.txt; echo ${s%.txt} ${s#he} ${#s} ${s/l/L}", 0, "hello llo.txt 9 heLlo.txt\n"),
    ("f() { echo \"fn $1\"; return 4; }; f arg; echo $?", 0, "fn arg\n4\n"),
    ("count() { if [ $1 -lt 50 ]; then count $(($1 + 1)); else echo reached $1; fi; }; count 0", 0, "reached 50\n"),
    ("(cd /tmp; pwd); pwd", 0, "/tmp\n/workspace\n"),
    ("{ echo a; echo b; } | wc -l", 0, "2\n"),
    ("exit 3", 3, ""),
    ("exit 300", 44, ""),
    ("set -e; false; echo not-reached", 1, ""),
    ("echo $((2 ** 10)) $((7 / 2)) $((7 % 3))", 0, "1024 3 1\n"),
    ("echo ${UNSET:-default}", 0, "default\n"),
    ("test 3 -gt 2 && echo gt; [ abc = abc ] && echo eq; [[ abc == a* ]] && echo glob", 0, "gt\neq\nglob\n"),
]


@pytest.mark.parametrize("index", range(len(SYNTAX)), ids=[s[0][:40] for s in SYNTAX])
def test_bash_syntax(syntax_results: list[tuple[int, str, str]], index: int) -> None:
    command, code, out = SYNTAX[index]
    got = syntax_results[index]
    assert (got[0], got[1]) == (code, out), (command, got)


@pytest.fixture(scope="module")
def syntax_results(engine: SandboxEngine) -> list[tuple[int, str, str]]:
    return shell(engine, *(s[0] for s in SYNTAX))


def test_stderr_is_kept_apart_and_redirected(engine: SandboxEngine) -> None:
    got = shell(engine, "echo out; echo err >&2", "echo err 2>&1 >&2 | cat", "ls /nowhere 2>/dev/null; echo rc=$?",
                "ls /nowhere 2>&1 | wc -l", "cat /missing | wc -l")
    assert got[0] == (0, "out\n", "err\n")
    assert got[2] == (0, "rc=2\n", "")
    assert got[3] == (0, "1\n", "")
    # Not the last command of a pipeline: its stderr is still shown (just-bash dropped it).
    assert got[4] == (0, "0\n", "cat: /missing: No such file or directory\n")


def test_output_reaches_the_runs_logs_as_each_command_ends(engine: SandboxEngine) -> None:
    code = (
        "from runtime import commands\n"
        "import sys\n"
        "def main(args):\n"
        "    first = commands.run('echo first; echo problem >&2')\n"
        "    print('between')\n"
        "    second = commands.run(['printf', '%s|', 'a b', '$HOME', '*'])\n"
        "    return [first, second]\n"
    )
    result = _run(engine, code)
    assert result.status == "completed", result.error
    assert result.output == [0, 0]
    assert "first\n" in result.logs and "problem\n" in result.logs
    assert result.logs.index("first") < result.logs.index("between") < result.logs.index("a b|$HOME|*|")


def test_argv_items_are_words_without_expansion(engine: SandboxEngine) -> None:
    got = shell(engine, ["echo", "$HOME", "a  b", "*", "it's", "; rm -rf /"], ["printf", "%s\\n", "x", "y"])
    assert got[0] == (0, "$HOME a  b * it's ; rm -rf /\n", "")
    assert got[1] == (0, "x\ny\n", "")


def test_cwd_env_and_stdin(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        ("pwd", {"cwd": "/tmp"}),
        ("mkdir -p sub && cd sub && pwd", {}),
        ("pwd", {}),  # a fresh shell each call: the cd above did not last
        ("pwd", {"cwd": "sub"}),  # relative to the caller's cwd
        ("echo $GREETING $HOME", {"env": {"GREETING": "hi"}}),
        ("echo ${GREETING:-unset}", {}),
        ("wc -l", {"stdin": "a\nb\nc\n"}),
        ("cat | tr a-z A-Z", {"stdin_hex": b"bytes in\n".hex()}),
        ("pwd", {"cwd": "/nowhere"}),
    )
    assert got[0] == (0, "/tmp\n", "")
    assert got[1] == (0, "/workspace/sub\n", "")
    assert got[2] == (0, "/workspace\n", "")
    assert got[3] == (0, "/workspace/sub\n", "")
    assert got[4] == (0, "hi /workspace\n", "")
    assert got[5] == (0, "unset\n", "")
    assert got[6] == (0, "3\n", "")
    assert got[7] == (0, "BYTES IN\n", "")
    assert got[8] == (1, "", "bash: cd: /nowhere: No such file or directory\n")


def test_wrong_argument_types_raise(engine: SandboxEngine) -> None:
    code = (
        "from runtime import commands\n"
        "def main(args):\n"
        "    seen = []\n"
        "    for call in (lambda: commands.run(3), lambda: commands.run(b'ls'), lambda: commands.run(['ls', 3]),\n"
        "                 lambda: commands.run([]), lambda: commands.run('ls', cwd=3),\n"
        "                 lambda: commands.run('ls', env={'A': 1}), lambda: commands.run('ls', stdin=5),\n"
        "                 lambda: commands.run('echo a\\0b'), lambda: commands.run('ls', env=[1])):\n"
        "        try:\n"
        "            call()\n"
        "            seen.append('none')\n"
        "        except (TypeError, ValueError) as e:\n"
        "            seen.append(type(e).__name__)\n"
        "    return seen\n"
    )
    result = _run(engine, code)
    assert result.output == ["TypeError", "TypeError", "TypeError", "ValueError", "TypeError", "TypeError",
                             "TypeError", "ValueError", "TypeError"], result.error


def test_a_parse_error_is_exit_2(engine: SandboxEngine) -> None:
    code, out, err = one(engine, "echo (")
    assert code == 2 and out == "" and err.startswith("bash: ")


# -- commands over the run's files ---------------------------------------------------

def test_file_commands(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "mkdir -p data/deep && printf 'b,2\\na,1\\nc,3\\na,1\\n' > data/t.csv && ls data",
        "cat data/t.csv | sort | uniq | cut -d, -f1 | tr '\\n' ' '",
        "head -n 1 data/t.csv; tail -n 1 data/t.csv; wc -l < data/t.csv",
        "grep -n 'a,' data/t.csv; grep -c x data/t.csv; echo rc=$?",
        "sed 's/,/=/' data/t.csv | head -2",
        "awk -F, '{s += $2} END {print s}' data/t.csv",
        "sort -t, -k2 -n data/t.csv | uniq -c | head -1",
        "touch data/deep/x.txt data/y.txt && find data -name '*.txt' | sort",
        "cp data/t.csv data/copy.csv && mv data/copy.csv data/moved.csv && ls data && rm data/moved.csv && ls data/moved.csv",
        "echo x | tee data/tee.txt > /dev/null; cat data/tee.txt",
        "printf 'a\\nb\\n' > one; printf 'a\\nc\\n' > two; diff one two; echo rc=$?",
        "ls data/*.csv data/deep/*",
        "echo data/*.txt",
        "printf '%05.1f|%s|%d\\n' 3.14159 word 42",
        "du -s data | cut -f2",
        "echo 'a b c' | xargs -n 1 echo item",
        "ls data | xargs -I{} echo 'file: {}'",
        "env | grep -c '^HOME=/workspace$'",
        "pwd; cd data/deep && pwd; cd - > /dev/null; pwd",
        "rm -r data/deep && test ! -e data/deep && echo removed",
        "mkdir data; echo rc=$?",
        "echo '{\"a\": {\"b\": [1, 2, 3]}}' | jq -c '.a.b | map(. * 2)'",
        "echo '[{\"n\": \"x\"}, {\"n\": \"y\"}]' | jq -r '.[].n'",
        "basename /a/b/c.txt .txt; dirname /a/b/c.txt",
        "seq 3 | paste -s -d+ -",
        "date +%Y | wc -c",
    )
    assert got[0] == (0, "deep\nt.csv\n", "")
    assert got[1][1] == "a b c "
    assert got[2] == (0, "b,2\na,1\n4\n", "")
    assert got[3] == (0, "2:a,1\n4:a,1\n0\nrc=1\n", "")
    assert got[4][1] == "b=2\na=1\n"
    assert got[5][1] == "7\n"
    assert got[6][1].split() == ["2", "a,1"]
    assert got[7][1] == "data/deep/x.txt\ndata/y.txt\n"
    assert got[8][0] == 2 and "moved.csv" in got[8][1] and "No such file or directory" in got[8][2]
    assert got[9] == (0, "x\n", "")
    # just-bash's diff answers in the unified format (bash's diff: the normal one; docs/commands.md)
    assert got[10][0] == 0 and got[10][1].endswith("rc=1\n") and "-b\n" in got[10][1] and "+c\n" in got[10][1]
    assert got[11][1] == "data/t.csv\ndata/deep/x.txt\n"
    assert got[12][1] == "data/tee.txt data/y.txt\n"
    assert got[13][1] == "003.1|word|42\n"
    assert got[14][1] == "data\n"
    assert got[15][1] == "item a\nitem b\nitem c\n"
    assert "file: t.csv\n" in got[16][1]
    assert got[17][1] == "1\n"
    assert got[18][1] == "/workspace\n/workspace/data/deep\n/workspace\n"
    assert got[19][1] == "removed\n"
    assert got[20][0] == 0 and got[20][1] == "rc=1\n" and "File exists" in got[20][2]
    assert got[21][1] == "[2,4,6]\n"
    assert got[22][1] == "x\ny\n"
    assert got[23][1] == "c\n/a/b\n"
    assert got[24][1] == "1+2+3\n"
    assert got[25][1] == "5\n"


def test_tar_and_gzip_round_trip(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "mkdir -p pack/sub && echo inside > pack/sub/f.txt && tar -czf pack.tgz pack && rm -r pack"
        " && tar -xzf pack.tgz && cat pack/sub/f.txt",
        "tar -tzf pack.tgz | sort",
        "printf 'zip me\\n' > z.txt && gzip z.txt && ls z.txt* && gunzip -c z.txt.gz && zcat z.txt.gz | wc -c",
        "python -c \"import gzip; print(gzip.open('z.txt.gz').read().decode(), end='')\"",
        "python -c \"import tarfile; print(sorted(tarfile.open('pack.tgz').getnames()))\"",
    )
    assert got[0] == (0, "inside\n", "")
    assert "pack/sub/f.txt" in got[1][1]
    assert got[2] == (0, "z.txt.gz\nzip me\n7\n", "")
    assert got[3] == (0, "zip me\n", "")
    assert "pack/sub/f.txt" in got[4][1]


def test_files_are_the_runs_real_files(engine: SandboxEngine) -> None:
    code = (
        "from runtime import commands\n"
        "import os\n"
        "def main(args):\n"
        "    with open('/workspace/from_python.txt', 'w') as f:\n"
        "        f.write('py\\n')\n"
        "    commands.run('cat from_python.txt > /workspace/from_shell.txt; echo more >> from_shell.txt;'\n"
        "                 ' mkdir -p /tmp/t; echo t > /tmp/t/x')\n"
        "    paths = ['/workspace/from_shell.txt', '/home/user/from_shell.txt', '/tmp/t/x']\n"
        "    return [open(path).read() for path in paths]\n"
    )
    result = _run(engine, code)
    assert result.output == ["py\nmore\n", "py\nmore\n", "t\n"], result.error


def test_a_sessions_next_run_sees_the_files_at_the_same_path(engine: SandboxEngine, tmp_path: Path) -> None:
    folder = tmp_path / "session"
    folder.mkdir()

    def session_run(version: int, command: str) -> RunResult:
        code = f"from runtime import commands\nstatus = commands.run({command!r})\nstatus"
        session = SessionRun(folder=str(folder), version=version, reseed=version == 0)
        return engine.run(RunRequest(kind="code", code=code, session=session, limits=POLICY.resolve(timeout_ms=30_000)))

    first = session_run(0, "mkdir -p /home/user/proj && echo kept > /home/user/proj/notes.txt")
    assert first.status == "completed" and first.output == 0, first.error
    second = session_run(1, "cat /workspace/proj/notes.txt && ls /home/user/proj")
    assert second.status == "completed" and second.output == 0, second.error
    assert second.logs == "kept\nnotes.txt\n"


def test_skills_are_read_only_and_links_out_are_refused(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "echo x > /skills/new.txt; echo rc=$?",
        "ln -s /etc/passwd out && cat out; echo rc=$?",
        "cat ../../etc/passwd; echo rc=$?",
        "ls /proc/self; echo rc=$?",
        "cat /dev/zero; echo rc=$?",
        "cat /dev/null; echo empty; echo gone > /dev/null; echo rc=$?",
    )
    for code, out, err in got[:5]:
        assert code == 0 and out.endswith(("rc=1\n", "rc=2\n")), (out, err)
        assert "/etc/passwd" not in out and "root:" not in out
    assert "root:" not in got[1][1] + got[2][1]
    assert got[5] == (0, "empty\nrc=0\n", "")


# -- python and pip ------------------------------------------------------------------

def test_python_runs_in_process(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "python -c 'print(1 + 1)' | wc -l",
        "python3 -c 'import sys; print(sys.argv)' a 'b c'",
        "python -c 'import sys; sys.exit(7)'; echo rc=$?",
        "python -c 'import sys; sys.exit(\"bad thing\")'",
        "python -c 'def f():\n    raise ValueError(\"boom\")\nf()'",
        "printf 'import sys\\nprint(\"file\", sys.argv[1:], __name__)\\n' > tool.py && python tool.py x y",
        "printf '#!/usr/bin/env python3\\nimport sys\\nprint(\"shebang\", sys.argv[1:])\\n' > run.py && ./run.py p q",
        "printf '#!/bin/sh\\necho \"sh script $1\"\\n' > run.sh && ./run.sh arg && bash run.sh other",
        "echo 'print(\"from stdin\")' | python -",
        "python -m json.tool <<< '{\"b\": 1}'",
        "python -c 'import os; print(os.getcwd())'",
        ("python -c 'import os; print(os.getcwd(), os.environ[\"A\"])'", {"cwd": "/tmp", "env": {"A": "z"}}),
        "export B=exported; C=temp python -c 'import os; print(os.environ.get(\"B\"), os.environ.get(\"C\"))'",
        "python -c 'import sys; print(sys.stdin.read().upper(), end=\"\")' <<< 'piped'",
        "python nothere.py; echo rc=$?",
        "python -m no_such_module; echo rc=$?",
        "python -V",
        "python -c 'print(__name__, [k for k in globals() if not k.startswith(\"__\")])'",
    )
    assert got[0] == (0, "1\n", "")
    assert got[1] == (0, "['-c', 'a', 'b c']\n", "")
    assert got[2] == (0, "rc=7\n", "")
    assert got[3] == (1, "", "bad thing\n")
    assert got[4][0] == 1 and got[4][2].startswith("Traceback (most recent call last):\n")
    assert got[4][2].endswith("ValueError: boom\n") and 'File "<string>", line 2, in f' in got[4][2]
    assert "_shellpy" not in got[4][2] and "runpy" not in got[4][2]
    assert got[5] == (0, "file ['x', 'y'] __main__\n", "")
    assert got[6] == (0, "shebang ['p', 'q']\n", "")
    assert got[7] == (0, "sh script arg\nsh script other\n", "")
    assert got[8] == (0, "from stdin\n", "")
    assert json.loads(got[9][1]) == {"b": 1}
    assert got[10] == (0, "/workspace\n", "")
    assert got[11] == (0, "/tmp z\n", "")
    assert got[12] == (0, "exported temp\n", "")
    assert got[13] == (0, "PIPED\n", "")
    assert got[14][1] == "rc=2\n" and "can't open file" in got[14][2]
    assert got[15] == (0, "rc=1\n", "python: No module named no_such_module\n")
    assert got[16][1].startswith("Python 3.")
    assert got[17] == (0, "__main__ []\n", "")


def test_python_leaves_the_callers_process_as_it_was(engine: SandboxEngine) -> None:
    code = (
        "from runtime import commands\n"
        "import os, sys\n"
        "def main(args):\n"
        "    before = [list(sys.argv), os.getcwd(), sys.stdout, sys.stderr, list(sys.path), dict(os.environ)]\n"
        "    commands.run(['python', '-c', 'import os, sys; os.chdir(\"/\"); sys.argv.append(1); '\n"
        "                  'sys.path.append(\"/x\"); os.environ[\"Z\"] = \"1\"; sys.exit(1)'], cwd='/tmp')\n"
        "    after = [list(sys.argv), os.getcwd(), sys.stdout, sys.stderr, list(sys.path), dict(os.environ)]\n"
        "    return [a == b for a, b in zip(before, after)]\n"
    )
    result = _run(engine, code)
    assert result.output == [True] * 6, result.error


def test_pip_speaks_for_the_guests_packages(engine: SandboxEngine) -> None:
    got = shell(engine, "pip list", "pip freeze | grep -i just-bash", "pip show just-bash", "pip install requests",
                "pip3 install -U numpy; echo rc=$?", "python -m pip list | grep -ci just-bash", "pip show no-such-thing")
    assert got[0][0] == 0 and got[0][1].startswith("Package") and "just-bash" in got[0][1]
    assert got[1] == (0, "just-bash==0.2.1\n", "")
    assert got[2][0] == 0 and "Name: just-bash\nVersion: 0.2.1\n" in got[2][1]
    # An engine's run without the server's grant installs nothing, and says so (packagecall.py).
    assert got[3][0] == 1 and "installs no packages" in got[3][2] and "rule: off" in got[3][2]
    assert got[4][1] == "rc=1\n"
    assert got[5][1] == "1\n"
    assert got[6][0] == 1 and "not found" in got[6][2]
    version = one(engine, "python -V")[1]
    if not version.startswith("Python 3.11."):  # the data image: its stack, as pip sees it
        assert "numpy" in got[0][1] and "pandas" in got[0][1]


def test_unknown_commands_are_127_with_a_hint(engine: SandboxEngine) -> None:
    got = shell(engine, "foo --bar", "curl https://example.com", "yes | head -n 1", "git status; echo rc=$?")
    assert got[0][0] == 127 and got[0][1] == ""
    assert got[0][2].startswith("bash: foo: command not found\nhint: ") and got[0][2].count("\n") == 2
    assert got[1][0] == 127 and "runtime.http" in got[1][2]
    assert "bash: yes: command not found" in got[2][2] and "seq" in got[2][2]
    assert got[3][1] == "rc=127\n" and "bash: git: command not found" in got[3][2]


def test_sh_and_bash_as_agent_frameworks_call_them(engine: SandboxEngine) -> None:
    """`sh -lc`, a multi-line `sh -c` with a function and a heredoc, `bash -euo pipefail -c`,
    `sh -s`, scripts by path, and what is wrong with an invocation: bash's own exit 2."""
    helper = ("set -eu\ninstall() {\n  mkdir -p \"$1\"\n  cat > \"$1/h.sh\" <<'EOF'\necho helper $1\nEOF\n}\n"
              "install tools\nsh tools/h.sh ok\n")
    got = shell(
        engine,
        ["sh", "-c", helper],
        ["sh", "-lc", "echo $0; exit 7"],
        ["bash", "-euo", "pipefail", "-c", "false | true; echo unreached"],
        ("sh -s a b", {"stdin": "echo \"$# $1 $2\""}),
        "printf 'exit 3\\n' > x.sh; ./x.sh; echo rc=$?",
        "printf '#!/usr/bin/env node\\n' > n.sh; ./n.sh; echo rc=$?",
        "sh -c; echo rc=$?",
        "bash -q -c true; echo rc=$?",
        "bash -o nosuch -c true; echo rc=$?",
        "sh missing.sh; echo rc=$?",
        "printf 'sh ./self.sh\\n' > self.sh; sh self.sh; echo rc=$?",
        ["bash", "-c", "echo " + "$(echo " * 5000 + "x" + ")" * 5000],
        ["sh", "-c", "f() {"],
    )
    assert got[0] == (0, "helper ok\n", "")
    assert got[1] == (7, "sh\n", "")
    assert got[2] == (1, "", "")
    assert got[3] == (0, "2 a b\n", "")
    assert got[4] == (0, "rc=3\n", "")
    assert got[5] == (0, "rc=126\n", "bash: ./n.sh: /usr/bin/env node: bad interpreter: No such file or directory\n")
    assert got[6] == (0, "rc=2\n", "sh: -c: option requires an argument\n")
    assert got[7] == (0, "rc=2\n", "bash: -q: invalid option\n")
    assert got[8] == (0, "rc=2\n", "bash: nosuch: invalid option name\n")
    assert got[9] == (0, "rc=127\n", "sh: missing.sh: No such file or directory\n")
    assert got[10][1] == "rc=2\n" and "shells nested 24 deep" in got[10][2]
    assert got[11][0] == 2 and "nested 5000 deep" in got[11][2]
    assert got[12][0] == 2 and got[12][2].startswith("sh: ")
    assert one(engine, "echo still here") == (0, "still here\n", "")


def test_trap(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "set -eu; d=work; mkdir -p $d; trap 'rm -rf \"$d\"; echo cleaned' EXIT; touch $d/f; false; echo no",
        "ls work; echo rc=$?",
        "trap 'echo x' NOSIG; echo rc=$?",
        "trap -x; echo rc=$?",
        "trap 'echo $((1/0))' ERR; false; echo next",
        "trap 'echo in-err; false' ERR; false; echo once",
        "trap 'exit 9' EXIT; echo body",
        "trap 'echo \"TERM kept\"' TERM INT; trap -p TERM; kill -TERM $$; echo rc=$?",
        "trap -l | head -2",
    )
    assert got[0] == (1, "cleaned\n", "")
    assert got[1][1] == "rc=2\n"  # the EXIT trap removed it
    assert got[2] == (0, "rc=1\n", "bash: trap: NOSIG: invalid signal specification\n")
    assert got[3][1] == "rc=2\n" and "invalid option" in got[3][2]
    assert got[5] == (0, "in-err\nonce\n", "")  # the trap's own failure does not run it again
    assert got[6] == (9, "body\n", "")
    assert got[7] == (0, "trap -- 'echo \"TERM kept\"' SIGTERM\nrc=1\n", "bash: kill: (1) - No such process\n")
    assert got[8] == (0, " 1) SIGHUP\n 2) SIGINT\n", "")


def test_programs_by_their_usual_paths(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "/bin/sh -c 'echo $0'; /usr/bin/env python3 -c 'print(7)'; /usr/local/bin/python -c 'print(8)'",
        "/bin/nothere; echo rc=$?",
        "command -v sh python3 cd; which ls; type grep; type -t /bin/ls; command -v /usr/bin/env",
        "command -v nothere; echo rc=$?; which nothere; echo rc=$?",
        "env A=1 B='two words' python3 -c 'import os; print(os.environ[\"A\"], os.environ[\"B\"])'",
    )
    assert got[0] == (0, "sh\n7\n8\n", "")
    assert got[1][1] == "rc=127\n" and got[1][2].startswith("bash: /bin/nothere: command not found\n")
    assert got[2] == (0, "/usr/bin/sh\n/usr/bin/python3\ncd\n/usr/bin/ls\ngrep is /usr/bin/grep\nfile\n"
                         "/usr/bin/env\n", "")
    assert got[3] == (0, "rc=1\nrc=1\n", "")
    assert got[4] == (0, "1 two words\n", "")


def test_background_jobs_run_to_their_end_in_place(engine: SandboxEngine) -> None:
    got = shell(
        engine,
        "sleep 0.2 & echo hi; wait; echo rc=$?",
        "echo \"[$!]\"; (exit 3) & p=$!; [ -n \"$p\" ] && wait $p; echo $?; wait %1; echo $?",
        "set -e; false & echo survived",
        "true & jobs; echo rc=$?; kill %1; echo rc=$?; wait 4242; echo rc=$?",
    )
    assert got[0] == (0, "hi\nrc=0\n", "")
    assert got[1] == (0, "[]\n3\n3\n", "")
    assert got[2] == (0, "survived\n", "")
    assert got[3] == (0, "rc=0\nrc=1\nrc=127\n",
                      "bash: kill: %1: no such job\nbash: wait: pid 4242 is not a child of this shell\n")


# Writes stdout through a byte stream, as the run's own sys.stdout is: what reaches it is bytes.
BYTES_OUT = """
import io, sys
from runtime import commands

def main(args):
    results = []
    for command in args["cmds"]:
        raw = io.BytesIO()
        saved = sys.stdout
        sys.stdout = out = io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)
        try:
            code = commands.run(command, stdin=bytes.fromhex(args["stdin"]))
        finally:
            sys.stdout = saved
        out.detach()
        results.append([code, raw.getvalue().hex()])
    return results
"""


def test_bytes_round_trip_through_pipes_files_and_stdout(engine: SandboxEngine) -> None:
    blob = bytes(range(256))
    cmds = [
        "cat > blob.bin; cat blob.bin",
        "cat blob.bin | tr -d '' | head -c 1000",
        "tar -cf - blob.bin | base64 -w0 | base64 -d | tar -xOf - >/dev/null; gzip -c blob.bin | gunzip -c",
        "printf '\\377x'; printf '\\303\\251'",
        "wc -c < blob.bin; cat blob.bin | wc -c; head -c 3 blob.bin | od -An -tx1",
    ]
    result = _run(engine, BYTES_OUT, {"cmds": cmds, "stdin": blob.hex()}, timeout_ms=60_000)
    assert result.status == "completed", result.error
    got = [(code, bytes.fromhex(out)) for code, out in result.output]  # type: ignore[union-attr]
    assert got[0] == (0, blob)
    assert got[1] == (0, blob)
    assert got[2] == (0, blob)
    assert got[3] == (0, b"\xffx\xc3\xa9")
    assert got[4] == (0, b"256\n256\n 00 01 02\n")


# -- hostile input ---------------------------------------------------------------------

def test_a_fork_bomb_is_an_error(engine: SandboxEngine) -> None:
    code, out, err = one(engine, ":(){ :|:& };:")
    assert code != 0 and out == "" and err.startswith("bash: ")
    assert one(engine, "echo still here") == (0, "still here\n", "")


def test_deep_substitution_nesting_is_refused_clearly(engine: SandboxEngine) -> None:
    ok = "echo " + "$(echo " * 40 + "x" + ")" * 40
    deep = "echo " + "$(echo " * 5000 + "x" + ")" * 5000
    got = shell(engine, ok, deep, "x=$(" * 300 + "echo" + ")" * 300)
    assert got[0] == (0, "x\n", "")
    assert got[1][0] == 2 and "nested 5000 deep" in got[1][2]
    assert got[2][0] == 2


def test_big_output_and_names(engine: SandboxEngine) -> None:
    long_name = "n" * 5000
    got = shell(
        engine,
        f"touch {long_name}; echo rc=$?",
        # WASI takes only UTF-8 names: the guest's filesystem refuses the name, clearly.
        "python -c 'open(b\"bad\\xff.txt\", \"w\")'",
        "mkdir -p many && cd many && for i in $(seq 1 300); do : > f$i.txt; done; ls | wc -l; echo *.txt | wc -w",
        "seq 1 100000 | tail -n 1",
        "head -c 2G /dev/zero; echo rc=$?",
    )
    assert got[0][1] == "rc=1\n" and got[0][2]  # the name is too long for the filesystem: its error
    assert got[1][0] == 1 and "Illegal byte sequence" in got[1][2]
    assert got[2] == (0, "300\n300\n", "")
    assert got[3] == (0, "100000\n", "")
    assert got[4][1] == "rc=1\n"


def test_the_runs_time_limit_still_applies(engine: SandboxEngine) -> None:
    result = _run(engine, "from runtime import commands\ncommands.run('while true; do :; done')", timeout_ms=1500)
    assert result.status == "failed" and result.error is not None
    assert result.error.type in ("Timeout", "CPULimitExceeded")
    again = shell(engine, "sleep 0.05 && echo fine", "timeout 0.1 sleep 3; echo rc=$?")
    assert again == [(0, "fine\n", ""), (0, "rc=124\n", "")]


# -- against native bash ---------------------------------------------------------------

CORPUS_DIR = Path(__file__).resolve().parent.parent / "commands_corpus"
BASH = "/bin/bash"


def corpus_entries(name: str = "corpus.txt") -> list[str]:
    """A corpus file of tests/commands_corpus/: one command line per line, or the lines
    between two `%%` lines as one."""
    entries: list[str] = []
    block: list[str] | None = None
    for line in (CORPUS_DIR / name).read_text().splitlines():
        if line == "%%":
            if block is not None:
                entries.append("\n".join(block))
            block = [] if block is None else None
            continue
        if block is not None:
            block.append(line)
        elif line and not line.startswith("#"):
            entries.append(line)
    return entries


def _native(entry: str, setup: str, folder: Path) -> tuple[int, str, str]:
    import subprocess

    folder.mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(folder), "LC_ALL": "C.UTF-8"}
    subprocess.run([BASH, "--noprofile", "--norc", "-c", setup], cwd=folder, env=env, check=True)
    done = subprocess.run([BASH, "--noprofile", "--norc", "-c", entry], cwd=folder, env=env, capture_output=True,
                          timeout=30)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


# Each entry over a fresh copy of the corpus's files, in /workspace/case.
CORPUS_RUN = """
import io, os, shutil, sys
from runtime import commands

def main(args):
    results = []
    for entry in args["entries"]:
        shutil.rmtree("/workspace/case", ignore_errors=True)
        os.mkdir("/workspace/case")
        assert commands.run(args["setup"], cwd="/workspace/case") == 0
        out, err = io.StringIO(), io.StringIO()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = out, err
        try:
            code = commands.run(entry, cwd="/workspace/case")
        finally:
            sys.stdout, sys.stderr = saved
        results.append([code, out.getvalue(), err.getvalue()])
    return results
"""


@pytest.fixture(scope="module")
def corpus_results(engine: SandboxEngine, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Outcome, Outcome]]:
    entries = corpus_entries()
    setup = (CORPUS_DIR / "setup.sh").read_text()
    result = _run(engine, CORPUS_RUN, {"entries": entries, "setup": setup}, timeout_ms=120_000)
    assert result.status == "completed", result.error
    root = tmp_path_factory.mktemp("native")
    native = []
    for i, entry in enumerate(entries):  # each in a folder named `case`, as in the guest
        (root / str(i)).mkdir()
        native.append(_native(entry, setup, root / str(i) / "case"))
    return [(n, tuple(g)) for n, g in zip(native, result.output, strict=True)]  # type: ignore[misc]


@pytest.mark.skipif(not os.path.exists(BASH), reason="no bash on this host")
@pytest.mark.parametrize("index", range(len(corpus_entries())), ids=[e.split("\n")[0][:50] for e in corpus_entries()])
def test_the_corpus_matches_native_bash(corpus_results: list[Any], index: int) -> None:
    native, guest = corpus_results[index]
    assert guest == native, corpus_entries()[index]


def test_run_from_inside_an_event_loop(engine: SandboxEngine) -> None:
    code = (
        "import asyncio\n"
        "from runtime import commands\n"
        "async def inner():\n"
        "    await asyncio.sleep(0.01)\n"
        "    status = commands.run('sleep 0.01; echo inside-loop')\n"
        "    await asyncio.sleep(0.01)\n"
        "    return status\n"
        "asyncio.run(inner())\n"
    )
    result = _run(engine, code)
    assert result.status == "completed" and result.output == 0, result.error
    assert result.logs == "inside-loop\n"
