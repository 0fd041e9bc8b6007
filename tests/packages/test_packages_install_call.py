"""`runtime.packages.install([...])` from inside a run (the packages_install host call) against a
real server and the real package index, on both images: importable in the same run, in a
session's next run, after a fork and after the server restarts; refusals naming the package and
the rule (a native package, the operator's allowlist, hostile requirement strings); two runs
installing the same set at once build it once; and the host side alone (policy off, a tenant's
quota) on the real installer (docs/packages.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from liveserver import LiveServer

from tests import images
from wasmrun.abi import PackagesInstallReply
from wasmrun.packages import runinstalls
from wasmrun.packages.ondemand import OnDemand
from wasmrun.packages.policy import PackagePolicy
from wasmrun.sandbox import PackageCall

pytestmark = pytest.mark.images("stdlib", "data")

HUMANIZE = "humanize==4.12.3"  # pure, no dependencies
TEXTTABLE = "texttable==1.7.0"  # not built into the data image (its tabulate is 0.10.0)
SLUGIFY = ["python-slugify==8.0.4", "text-unidecode==1.3"]  # a package and its dependency
ALLOWED = ["humanize", "texttable", "python-slugify", "text-unidecode", "orjson"]
Call = Callable[..., dict[str, Any]]


class Served:
    def __init__(self, data: Path) -> None:
        self.data = data
        policy = data / "policy.toml"
        data.mkdir(parents=True, exist_ok=True)
        policy.write_text(f'[packages]\nmode = "allowlist"\nallow = {json.dumps(ALLOWED)}\n')
        self.args = ("--policy-file", str(policy))
        self.server = LiveServer(data, *self.args)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer: dict[str, Any] = httpx2.post(self.server.endpoint, json=body, timeout=180).json()
        return answer

    def run(self, code: str, **params: Any) -> dict[str, Any]:
        answer = self.call("run_code", language="python", code=code, **params)
        assert "result" in answer, answer
        result: dict[str, Any] = answer["result"]
        return result

    def restart(self) -> None:
        self.server.stop()
        self.server = LiveServer(self.data, *self.args)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    it = Served(tmp_path_factory.mktemp(f"install-call-{images.current()}") / "data")
    yield it
    it.server.stop()


def _completed(result: dict[str, Any]) -> Any:
    assert result["status"] == "completed", result
    return result["output"]


def test_a_fresh_run_installs_and_imports_in_the_same_run(served: Served) -> None:
    t0 = time.monotonic()
    out = _completed(served.run(
        "from runtime import packages\n"
        f"got = packages.install(['{HUMANIZE}'])\n"
        "import humanize\n"
        "[got, humanize.naturalsize(1_000_000)]"
    ))
    took = time.monotonic() - t0
    got, shown = out
    assert shown == "1.0 MB"
    assert got["added"] == [HUMANIZE]
    assert [(p["name"], p["version"], p["requested"]) for p in got["packages"]] == [("humanize", "4.12.3", True)]
    assert got["bytes"] > 10_000 and got["packages"][0]["bytes"] == got["bytes"]
    assert isinstance(got["cached"], bool) and 0 <= got["seconds"] < took
    # A later fresh run asking again gets the cached set; a fresh run without it does not have it.
    again = _completed(served.run(f"import runtime\nruntime.packages.install(['{HUMANIZE}'])"))
    assert again["cached"] is True and again["added"] == [HUMANIZE]
    missing = served.run("import humanize")
    assert missing["status"] == "failed" and "runtime.packages.install" in missing["error"]["message"]


def test_a_session_keeps_what_a_run_installed_across_runs_forks_and_a_restart(served: Served) -> None:
    session = served.call("create_session", language="python")["result"]["session_id"]
    first = _completed(served.run(
        "from runtime import packages\n"
        f"packages.install(['{TEXTTABLE}'])\n"
        "import texttable\n"
        "table = texttable.Texttable()\n"
        "table.add_rows([[1, 2]], header=False)\n"
        "table.draw()",
        session_id=session,
    ))
    assert "| 1 | 2 |" in first
    # Installed in a second step of the same session: the set grows, both import.
    _completed(served.run(f"from runtime import packages\npackages.install(['{HUMANIZE}'])", session_id=session))
    later = (
        "import humanize, texttable, sys\n"
        "import humanize.filesize\n"  # a submodule of a package imported from the run's copy
        "[humanize.naturalsize(2_000_000), texttable.__file__, [p for p in sys.path if '.wasmrun-packages' in p]]"
    )
    size, where, copies = _completed(served.run(later, session_id=session))
    assert (size, copies) == ("2.0 MB", []) and where.startswith("/packages/texttable"), where
    listed = served.call("list_sessions")["result"]["sessions"]
    pins = next(s for s in listed if s["session_id"] == session)["packages"]
    assert HUMANIZE in pins and TEXTTABLE in pins
    fork = served.call("fork_session", session_id=session)["result"]["session_id"]
    assert _completed(served.run("import humanize\nhumanize.intcomma(1234567)", session_id=fork)) == "1,234,567"
    served.restart()
    assert _completed(served.run("import texttable\ntexttable.__version__", session_id=session)) == "1.7.0"
    assert _completed(served.run("import humanize\nhumanize.intcomma(1000)", session_id=fork)) == "1,000"


REFUSALS = r"""
from runtime import packages
answers = {}
cases = {
    "native": ["orjson==3.10.3"],
    "allowlist": ["requests"],
    "long": ["a" * 5000],
    "nul": ["humanize\x00"],
    "dots": ["../../etc/passwd"],
    "url": ["https://example.com/x.whl"],
    "surrogate": ["hum\ud800anize"],
    "many": [f"p{i}" for i in range(10_000)],
    "option": ["--index-url=https://evil.example/simple"],
}
for key, asked in cases.items():
    try:
        packages.install(asked)
        answers[key] = "installed"
    except packages.PackageInstallError as exc:
        answers[key] = [exc.rule, exc.package[:40], str(exc)[:300]]
try:
    packages.install([7])
except TypeError as exc:
    answers["type"] = str(exc)
answers
"""


def test_refusals_name_the_package_and_the_rule_and_nothing_is_installed(served: Served) -> None:
    answers = _completed(served.run(REFUSALS))
    rule, package, message = answers["native"]
    assert (rule, package) == ("native", "orjson") and "native" in message
    assert answers["allowlist"][:2] == ["allowlist", "requests"]
    for key in ("long", "nul", "dots", "url", "surrogate", "many", "option"):
        assert answers[key][0] == "name", (key, answers[key])
    assert "must be a string" in answers["type"]
    # Nothing leaked: no host path in any answer; the server serves on.
    assert str(served.data) not in json.dumps(answers)
    assert _completed(served.run("1 + 1")) == 2


def test_two_runs_installing_the_same_set_at_once_build_it_once(served: Served) -> None:
    code = (
        "from runtime import packages\n"
        f"got = packages.install({SLUGIFY!r})\n"
        "import slugify\n"
        "[got['cached'], sorted(got['added']), slugify.slugify('Héllo Wörld')]"
    )
    outs: list[Any] = []

    def one() -> None:
        outs.append(_completed(served.run(code)))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outs) == 2
    assert sorted(o[0] for o in outs) == [False, True]  # one built it, the other found it
    assert all(o[1] == sorted(SLUGIFY) and o[2] == "hello-world" for o in outs)
    sets = [p for p in (served.data / "packages" / "sets").glob("*/s-*") if (p / "layer.json").is_file()]
    slug_sets = [p for p in sets if "python-slugify" in (p / "layer.json").read_text()]
    assert len(slug_sets) == 1


# -- the host side alone: the real installer, without a guest ---------------------------------


def _call(tmp_path: Path, policy: PackagePolicy) -> PackageCall:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    grant = runinstalls.grant(OnDemand(tmp_path / "data", policy))
    return PackageCall(grant, "cp311", "alice", None, tmp)


def _reply(call: PackageCall, requirements: Any) -> PackagesInstallReply:
    import msgspec

    raw = call.install(json.dumps({"requirements": requirements}).encode(), time.monotonic() + 120, lambda *a: None)
    return msgspec.json.decode(raw, type=PackagesInstallReply)


@pytest.mark.images("stdlib")
def test_policy_off_and_a_tenant_quota_refuse_with_their_rule(tmp_path: Path) -> None:
    off = _reply(_call(tmp_path, PackagePolicy(mode="off")), [HUMANIZE])
    assert (off.ok, off.rule, off.package) == (False, "off", HUMANIZE)
    quota = _call(tmp_path, PackagePolicy(max_tenant_bytes=1000))
    over = _reply(quota, [HUMANIZE])
    assert (over.ok, over.rule) == (False, "max_tenant_bytes") and "1000" in over.error
    assert quota.added == [] and not (tmp_path / "tmp" / ".wasmrun-packages").exists()
    for hostile in (b"", b"{", b'{"requirements": "x"}', b'{"requirements": [], "extra": 1}', b"\xff" * 10):
        raw = quota.install(hostile, time.monotonic() + 60, lambda *a: None)
        assert json.loads(raw)["ok"] is False
