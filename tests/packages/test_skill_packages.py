"""A skill's declared packages (`[packages] requires`) installed on demand, against a real
server and the real package index: at create_skill (what was installed in its answer, a
refusal with nothing stored), at a server's start for the operator's folder skills (in the
background), and mounted in every run that mounts the skill (execute_skill, run_code's
`mount_skills` with the run's own `packages`, a session's `skills`), on both images
(docs/packages.md, "Skills that need packages")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from liveserver import LiveServer
from skillfiles import write_skill

from tests import images
from wasmrun.tenants.store import TenantStore

pytestmark = pytest.mark.images("stdlib", "data")

HUMANIZE = "humanize==4.9.0"  # pure (py3-none-any), small, no dependencies
TEXTTABLE = "texttable==1.7.0"  # pure, in neither image
NATIVE = "orjson==3.10.3"  # native wheels only
USES_HUMANIZE = "import humanize\n\ndef main(args):\n    return [humanize.intcomma(args['n']), humanize.__version__]\n"
Call = Callable[..., dict[str, Any]]


def _caller(server: LiveServer, key: str) -> Call:
    def call(method: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {"authorization": f"Bearer {key}"} if key else {}
        answer: dict[str, Any] = httpx2.post(server.endpoint, json=body, headers=headers, timeout=180).json()
        return answer

    return call


def _manifest(name: str, requires: list[str]) -> dict[str, Any]:
    return {
        "name": name, "version": "0.1.0", "description": "Needs packages.", "kind": "action",
        "runtime": {"language": "python", "entrypoint": "code/main.py"}, "packages": {"requires": requires},
    }


def _create(call: Call, name: str, requires: list[str], code: str = USES_HUMANIZE) -> dict[str, Any]:
    return call("create_skill", manifest=_manifest(name, requires), skill_md="# x\n",
                files=[{"path": "code/main.py", "content": code}])


class Served:
    def __init__(self, data: Path, skills: Path) -> None:
        self.data = data
        store = TenantStore(data)
        self.alice = store.add("alice", {"sessions": 20})
        self.bob = store.add("bob", {})
        self.carol = store.add("carol", {})
        policy = data / "policy.toml"
        policy.write_text("[packages]\nmax_sets_per_tenant = 2\n")
        self.server = LiveServer(data, "--policy-file", str(policy), "--skills-dir", str(skills))

    def as_(self, key: str) -> Call:
        return _caller(self.server, key)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    top = tmp_path_factory.mktemp(f"skillpkgs-{images.current()}")
    skills = top / "skills"
    write_skill(skills, "ops.tables", code=(
        "import texttable\n\ndef main(args):\n    t = texttable.Texttable()\n    t.add_rows([['a'], [1]])\n"
        "    return t.draw().splitlines()[1]\n"
    ), packages={"requires": [TEXTTABLE]})
    write_skill(skills, "ops.broken", packages={"requires": ["not-a-real-package-wasmrun-xyz"]})
    it = Served(top / "data", skills)
    yield it
    it.server.stop()


def _ok(answer: dict[str, Any]) -> Any:
    assert "result" in answer, answer
    return answer["result"]


def test_create_skill_installs_what_it_declares_and_its_runs_import_it(served: Served) -> None:
    alice = served.as_(served.alice)
    created = _ok(_create(alice, "user.pkgs.counts", [HUMANIZE]))
    installed = created["packages_installed"]
    assert [(p["name"], p["version"], p["requested"]) for p in installed["packages"]] == [("humanize", "4.9.0", True)]
    assert installed["bytes"] > 50_000
    ran = _ok(alice("execute_skill", name="user.pkgs.counts", args={"n": 1234567}))
    assert ran["output"] == ["1,234,567", "4.9.0"], ran
    assert ran["packages"]["set"] == installed["set"] and ran["packages"]["cached"] is True


def test_run_code_mounting_the_skill_gets_its_packages_and_its_own(served: Served) -> None:
    alice = served.as_(served.alice)
    _ok(_create(alice, "user.pkgs.mounted", [HUMANIZE]))
    code = (
        "from skills.user.pkgs.mounted.main import main as counts\nimport texttable\n"
        "[counts({'n': 1000}), texttable.__version__]"
    )
    both = _ok(alice("run_code", language="python", code=code, mount_skills=["user.pkgs.mounted"],
                     packages=[TEXTTABLE]))
    assert both["output"] == [["1,000", "4.9.0"], "1.7.0"], both
    assert {p["name"] for p in both["packages"]["packages"]} == {"humanize", "texttable"}
    # Without the skill the run has neither.
    plain = _ok(alice("run_code", language="python", code="import humanize"))
    assert plain["status"] == "failed" and plain["error"]["type"] == "ModuleNotFoundError"


def test_a_session_with_the_skill_keeps_its_packages(served: Served) -> None:
    alice = served.as_(served.alice)
    _ok(_create(alice, "user.pkgs.insession", [HUMANIZE]))
    info = _ok(alice("create_session", language="python", skills=["user.pkgs.insession"]))
    assert info["packages"] == ["humanize==4.9.0"]
    session = info["session_id"]
    first = _ok(alice("run_code", language="python", session_id=session,
                      code="import humanize\nx = humanize.ordinal(3)\nx"))
    assert first["output"] == "3rd", first
    fork = _ok(alice("fork_session", session_id=session))["session_id"]
    again = _ok(alice("run_code", language="python", session_id=fork, code="import humanize\n(x, humanize.ordinal(2))"))
    assert again["output"] == ["3rd", "2nd"], again


def test_a_skill_whose_packages_cannot_be_installed_is_not_created(served: Served) -> None:
    alice = served.as_(served.carol)  # a tenant with room for sets: alice has used hers
    error = _create(alice, "user.pkgs.native", [NATIVE])["error"]
    assert error["code"] == -32602, error
    assert error["data"] == {"field": "manifest.packages.requires", "package": "orjson", "rule": "native"}
    assert "native code" in error["message"] and "Traceback" not in error["message"]
    assert "error" in alice("describe_skill", name="user.pkgs.native")  # nothing stored
    # A name no index has: pip's answer, naming it; nothing stored either.
    missing = _create(alice, "user.pkgs.nosuch", ["not-a-real-package-wasmrun-xyz"])["error"]
    assert missing["code"] == -32602 and "not-a-real-package-wasmrun-xyz" in missing["message"], missing
    assert missing["data"]["field"] == "manifest.packages.requires"
    assert "error" in alice("describe_skill", name="user.pkgs.nosuch")


def test_the_creating_tenant_pays_for_the_set(served: Served) -> None:
    """max_sets_per_tenant = 2: bob's first two skills build a set each, his third new set is
    his quota error (and nothing is stored); carol may use alice's set, which costs her nothing."""
    bob = served.as_(served.bob)
    for i, version in enumerate(("4.8.0", "4.7.0")):
        _ok(_create(bob, f"user.pkgs.bob{i}", [f"humanize=={version}"], code="def main(args):\n    return 1\n"))
    over = _create(bob, "user.pkgs.bob2", ["humanize==4.6.0"], code="def main(args):\n    return 1\n")
    assert over["error"]["code"] == -32002 and over["error"]["data"]["limit"] == "max_sets_per_tenant", over
    assert "error" in bob("describe_skill", name="user.pkgs.bob2")
    carol = served.as_(served.carol)
    shared = _ok(_create(carol, "user.pkgs.carol", [HUMANIZE]))
    assert shared["packages_installed"]["cached"] is True


def test_the_operators_folder_skill_has_its_packages(served: Served) -> None:
    """Installed in the background at start; its first run waits for that install if it is
    still going, and every run mounts the set."""
    carol = served.as_(served.carol)
    ran = _ok(carol("execute_skill", name="ops.tables", args={}))
    assert ran["output"] == "| a |", ran
    assert [p["name"] for p in ran["packages"]["packages"]] == ["texttable"]


def test_a_folder_skill_whose_packages_do_not_exist_fails_its_runs_clearly(served: Served) -> None:
    answer = served.as_(served.carol)("execute_skill", name="ops.broken", args={})
    error = answer["error"]
    assert error["code"] == -32602 and error["data"]["field"] == "name", answer
    assert "not-a-real-package-wasmrun-xyz" in error["message"] and "Traceback" not in error["message"]
    # the server goes on serving
    assert _ok(served.as_(served.carol)("run_code", language="python", code="1 + 1"))["output"] == 2


def test_with_installs_off_a_skill_is_refused_and_a_folder_skill_warned_about(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    write_skill(skills, "ops.needs", packages={"requires": ["humanize"]})
    live = LiveServer(tmp_path / "data", "--packages", "off", "--skills-dir", str(skills))
    try:
        call = _caller(live, "")  # no tenants: no key
        error = _create(call, "user.pkgs.off", [HUMANIZE])["error"]
        assert error["code"] == -32602 and "wasmrun packages add humanize==4.9.0" in error["message"], error
        ran = _ok(call("execute_skill", name="ops.needs", args={}))  # runs with what the server has
        assert ran["status"] == "completed" and "packages" not in ran
    finally:
        log = live.stop()
    assert "skill ops.needs requires packages this server does not have: humanize" in log
