"""`pip install` as the guest shell's command (run_command, E2B's commands.run) and in cells
(`!pip install`, `%pip install -q`, `!{sys.executable} -m pip install` through E2B's code
interpreter SDK), reaching the packages_install host call: real packages from the index,
importable in the same command line and the next cell; pip's flags taken or refused with the
reason; `pip list/show/freeze` from what is mounted; smolagents' E2BExecutor's
`install_packages` step unchanged (docs/packages.md, docs/commands.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from e2b_code_interpreter import Sandbox

from tests import images
from tests.e2benv import e2b_environment
from tests.liveserver import LiveServer
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")

HUMANIZE = "humanize==4.12.3"
TEXTTABLE = "texttable==1.7.0"  # pure, no dependencies, not built into the data image


class Live:
    def __init__(self, data: Path) -> None:
        self.key = TenantStore(data).add("alice")
        self.server = LiveServer(data)

    def command(self, command: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": "run_command", "params": {"command": command, **params}}
        answer: dict[str, Any] = httpx2.post(
            self.server.endpoint, json=body, headers={"authorization": f"Bearer {self.key}"}, timeout=180
        ).json()
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    it = Live(tmp_path_factory.mktemp(f"pip-{images.current()}") / "data")
    try:
        with e2b_environment(it.server, it.key):
            yield it
    finally:
        it.server.stop()


def test_pip_install_then_import_in_one_command_line(live: Live) -> None:
    ran = live.command(f"pip install {HUMANIZE} && python -c 'import humanize; print(humanize.naturalsize(10**6))'")
    assert ran["exit_code"] == 0, ran
    assert "Successfully installed humanize-4.12.3" in ran["stdout"]
    assert ran["stdout"].endswith("1.0 MB\n")
    # Asked again in the same run (pip3, python -m pip, uv pip): already there, pip's words.
    again = live.command(f"pip install {HUMANIZE} && pip3 install humanize && python3 -m pip install {HUMANIZE}"
                         " && uv pip install humanize && python -c 'import humanize; print(humanize.__version__)'")
    assert again["exit_code"] == 0, again
    assert again["stdout"].count("Requirement already satisfied: humanize") == 3, again["stdout"]
    assert again["stdout"].endswith("4.12.3\n")


def test_flags_agents_write_a_requirements_file_and_pip_list_show_freeze(live: Live) -> None:
    script = (
        f"printf '# tools\\n{TEXTTABLE}  # tables\\n\\nstatistics\\n' > requirements.txt && "
        "pip install -q -U --user --no-cache-dir --break-system-packages --disable-pip-version-check "
        "--root-user-action=ignore -r requirements.txt && "
        "pip list && pip freeze | grep -i texttable && pip show texttable | head -2 && "
        "python -c 'import texttable; t = texttable.Texttable(); t.add_rows([[1, 2]], header=False); print(t.draw())'"
    )
    ran = live.command(script)
    assert ran["exit_code"] == 0, ran
    out = ran["stdout"]
    assert "Successfully installed" not in out  # -q
    assert "texttable==1.7.0\n" in out and "Name: texttable\nVersion: 1.7.0\n" in out
    assert any(line.split()[:2] == ["texttable", "1.7.0"] for line in out.splitlines())
    assert "| 1 | 2 |" in out


@pytest.mark.parametrize(("line", "reason"), [
    ("pip install -e .", "editable"),
    ("pip install ./mypkg", "local path"),
    ("pip install /tmp/x-1.0-py3-none-any.whl", "local path"),
    ("pip install https://example.com/x-1.0.tar.gz", "URL"),
    ("pip install 'x @ https://example.com/x.whl'", "URL"),
    ("pip install --index-url https://evil.example/simple humanize", "index"),
    ("pip install -i https://evil.example/simple humanize", "index"),
    ("pip install --no-binary :all: humanize", "wheels only"),
    ("pip install -r missing.txt", "Could not open requirements file"),
    ("pip install", "at least one requirement"),
    ("pip install orjson==3.10.3", "rule: native"),
    ("pip install 'a\u0001b'", "rule: name"),
    ("pip uninstall humanize", "not available"),
])
def test_refused_flags_and_packages_say_why(live: Live, line: str, reason: str) -> None:
    ran = live.command(line)
    assert ran["exit_code"] == 1, ran
    assert reason in ran["stderr"], ran["stderr"]
    assert "Traceback" not in ran["stderr"] and "/root" not in ran["stderr"]


def test_cells_install_and_the_next_cell_imports(live: Live) -> None:
    sandbox = Sandbox.create()
    try:
        first = sandbox.run_code(f"!pip install {HUMANIZE}\nimport humanize\nhumanize.naturalsize(3_000_000)")
        assert first.error is None, first.error
        assert first.text == "'3.0 MB'"  # E2B's text is the result's repr
        assert any("Successfully installed humanize-4.12.3" in line for line in first.logs.stdout), first.logs
        second = sandbox.run_code(f"%pip install -q {TEXTTABLE}")
        assert second.error is None and not "".join(second.logs.stdout), second.logs
        third = sandbox.run_code("!{sys.executable} -m pip install humanize\nimport texttable, humanize\n"
                                 "texttable.__version__, humanize.intcomma(1000)")
        assert third.error is None and third.text == "('1.7.0', '1,000')", (third.error, third.text)
        refused = sandbox.run_code("!pip install -e .\n1 + 1")
        assert refused.text == "2" and any("editable" in line for line in refused.logs.stderr), refused.logs
        # E2B's commands.run is the same shell: the sandbox's session has the packages.
        assert "humanize" in sandbox.commands.run("pip freeze").stdout
    finally:
        sandbox.kill()


@pytest.mark.images("data")
def test_a_name_built_into_the_image_is_its_version_said_when_another_is_asked(live: Live) -> None:
    ran = live.command("pip install tabulate 'tabulate>=0.10' && pip install tabulate==0.9.0"
                       " && python -c 'import tabulate; print(tabulate.__version__)'")
    assert ran["exit_code"] == 0, ran
    lines = ran["stdout"].splitlines()
    assert lines[:2] == ["Requirement already satisfied: tabulate in the image (0.10.0)"] * 2, lines
    assert lines[2].startswith("WARNING: tabulate==0.9.0 was asked; the image has tabulate 0.10.0 built in"), lines
    assert lines[-1] == "0.10.0", lines


@pytest.mark.images("data")  # smolagents' executor imports numpy and PIL in the sandbox
def test_smolagents_e2b_executor_installs_packages_unchanged(live: Live) -> None:
    pytest.importorskip("smolagents")
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.remote_executors import E2BExecutor

    executor = E2BExecutor(additional_imports=[HUMANIZE, "statistics"], logger=AgentLogger(level=LogLevel.OFF))
    try:
        step = executor("import humanize, statistics\nhumanize.naturalsize(statistics.mean([1e6, 3e6]))")
        assert step.output == "'2.0 MB'", step  # the result's text/plain, a repr (as E2B's Jupyter)
    finally:
        executor.cleanup()
