"""The spec's Python client, verbatim, against `wasmrun serve` on a loopback port.

Only the skill names in the flow differ from the spec: it uses the bundled
data.* skills instead of salesforce.* ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests

from tests.liveserver import LiveServer


# ---- verbatim from the spec's "Python Client Example" -------------------------
class SkillsRuntimeClient:
    def __init__(self, endpoint="http://localhost:8080/rpc"):
        self.endpoint = endpoint
        self.request_id = 0

    def _call(self, method, params=None):
        self.request_id += 1
        payload = {
            "jsonrpc": "2.0",
            "id": str(self.request_id),
            "method": method,
            "params": params or {}
        }
        response = requests.post(self.endpoint, json=payload)
        result = response.json()

        if "error" in result:
            raise Exception(f"RPC Error: {result['error']}")
        return result["result"]

    def list_skills(self, namespace=None, detail="names", limit=50):
        return self._call("list_skills", {
            "namespace": namespace,
            "detail": detail,
            "limit": limit
        })

    def describe_skill(self, name, version=None, detail="summary"):
        params = {"name": name, "detail": detail}
        if version:
            params["version"] = version
        return self._call("describe_skill", params)

    def read_skill_file(self, name, path, version=None):
        params = {"name": name, "path": path}
        if version:
            params["version"] = version
        return self._call("read_skill_file", params)

    def execute_skill(self, name, args=None, version=None,
                     input_blobs=None, timeout_ms=None):
        params = {"name": name}
        if version:
            params["version"] = version
        if args:
            params["args"] = args
        if input_blobs:
            params["input_blobs"] = input_blobs
        if timeout_ms:
            params["timeout_ms"] = timeout_ms
        return self._call("execute_skill", params)

    def run_code(self, code, language="python", entrypoint="main",
                args=None, mount_skills=None, input_blobs=None,
                timeout_ms=None):
        params = {
            "language": language,
            "code": code,
            "entrypoint": entrypoint
        }
        if args:
            params["args"] = args
        if mount_skills:
            params["mount_skills"] = mount_skills
        if input_blobs:
            params["input_blobs"] = input_blobs
        if timeout_ms:
            params["limits"] = {"timeout_ms": timeout_ms}
        return self._call("run_code", params)

    def create_blob(self, content, kind="text/plain"):
        return self._call("create_blob", {
            "content": content,
            "kind": kind
        })

    def read_blob(self, blob_id, mode="sample_head", max_bytes=2000):
        return self._call("read_blob", {
            "blob_id": blob_id,
            "mode": mode,
            "max_bytes": max_bytes
        })

    def load_skills_protocol_guide(self):
        return self._call("load_skills_protocol_guide", {})
# ---- end of the spec's client ----------------------------------------------------


# The server under test: a real `wasmrun serve` (tests/liveserver.py).
Server = LiveServer


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e-data")


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[Server]:
    srv = Server(data_dir)
    yield srv
    err = srv.stop()
    assert "panic" not in err.lower(), err


@pytest.fixture()
def client(server: Server) -> SkillsRuntimeClient:
    return SkillsRuntimeClient(endpoint=server.endpoint)


def test_spec_client_flow(client: SkillsRuntimeClient, capsys: pytest.CaptureFixture[str]) -> None:
    # 1. Load the protocol guide (first-time usage)
    guide = client.load_skills_protocol_guide()
    print(guide["content"])
    assert guide["content"].startswith("# Skills Protocol Overview")

    # 2. Discover available skills
    skills = client.list_skills(namespace="data")
    print(f"Found {len(skills['skills'])} data skills")
    assert [s["name"] for s in skills["skills"]] == ["data.csv.profile", "data.json.query"]

    # 3. Inspect a specific skill
    skill_info = client.describe_skill("data.csv.profile")
    print(f"Skill: {skill_info['skill']['manifest']['description']}")
    assert skill_info["skill"]["skill_md_frontmatter"]["name"] == "CSV Profile"

    # 4. Read full documentation
    docs = client.read_skill_file("data.csv.profile", "SKILL.md")
    print(docs["content"])
    assert "# data.csv.profile" in docs["content"]

    # 5. Create a blob for large data
    csv_data = "name,email,company\nJohn Doe,john@example.com,Acme Inc\nJane Roe,jane@example.com,Beta LLC\n"
    blob = client.create_blob(csv_data, kind="text/csv")
    print(f"Created blob: {blob['blob_id']}")
    assert blob["size_bytes"] == len(csv_data)

    # 6. Execute the skill
    result = client.execute_skill(
        name="data.csv.profile",
        args={"blob_id": blob["blob_id"]},
        input_blobs=[blob["blob_id"]],
    )
    if result["status"] == "completed":
        print(f"Success: {result['summary']}")
        print(f"Output: {result['output']}")
    else:
        print(f"Failed: {result['error']['message']}")
    assert result["status"] == "completed", result
    assert result["output"]["rows"] == 2
    assert result["summary"].startswith("Profiled 2 rows")

    # 7. Run custom code that uses multiple skills
    code = """
from skills.data.csv.profile import main as profile
from skills.data.json.query import main as query
from runtime import blobs

def main(args):
    report = profile({'blob_id': args['sheet_blob']})
    columns_blob = blobs.write_json(report['columns'])
    names = query({'blob_id': columns_blob, 'path': '[*].name'})
    return {'rows': report['rows'], 'columns': names['result']}
"""
    result = client.run_code(
        code=code,
        mount_skills=["data.csv.profile", "data.json.query"],
        input_blobs=[blob["blob_id"]],
        args={"sheet_blob": blob["blob_id"]},
    )
    print(f"Custom workflow result: {result['output']}")
    assert result["status"] == "completed", result
    assert result["output"] == {"rows": 2, "columns": ["name", "email", "company"]}
    assert "Found 2 data skills" in capsys.readouterr().out


def test_errors_come_back_as_the_client_expects(client: SkillsRuntimeClient) -> None:
    with pytest.raises(Exception, match="-32602"):
        client.describe_skill("salesforce.leads.sync")
    failed = client.run_code("def main(args):\n    raise RuntimeError('boom')\n")
    assert failed["status"] == "failed" and failed["error"]["type"] == "RuntimeError"


def test_concurrent_runs_over_the_worker_pool(client: SkillsRuntimeClient, server: Server) -> None:
    code = "def main(args):\n    return sum(range(args['n']))\n"

    def one(n: int) -> int:
        return SkillsRuntimeClient(endpoint=server.endpoint).run_code(code, args={"n": n})["output"]

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(1, 25))) == [sum(range(n)) for n in range(1, 25)]


def test_output_pointer_over_http(client: SkillsRuntimeClient) -> None:
    result = client.run_code("def main(args):\n    return list(range(3000))\n")
    pointer = result["output"]
    full = client.read_blob(pointer["output_blob"], mode="full")
    assert json.loads(full["content"]) == list(range(3000))


def test_blobs_and_skills_survive_a_restart(data_dir: Path, tmp_path: Path) -> None:
    first = Server(data_dir)
    try:
        client = SkillsRuntimeClient(endpoint=first.endpoint)
        blob = client.create_blob("kept", kind="text/plain")["blob_id"]
        client._call("create_skill", {
            "manifest": {
                "name": "user.kept", "version": "1.0.0", "description": "Kept.", "kind": "instruction",
            },
            "skill_md": "# Kept\n",
        })
    finally:
        first.stop()
    second = Server(data_dir)
    try:
        client = SkillsRuntimeClient(endpoint=second.endpoint)
        assert client.read_blob(blob)["content"] == "kept"
        assert client.describe_skill("user.kept")["skill"]["manifest"]["version"] == "1.0.0"
    finally:
        second.stop()


SPEC = Path("/work/shared/spec/skills-protocol-v0.1.txt")


@pytest.mark.skipif(not SPEC.exists(), reason="spec text not available")
def test_client_above_is_the_spec_text_verbatim() -> None:
    spec = SPEC.read_text()
    expected = spec[spec.index("class SkillsRuntimeClient:") : spec.index("# Example usage")].rstrip()
    here = Path(__file__).read_text()
    end = here.index("# ---- end of the spec's client")
    ours = here[here.index("class SkillsRuntimeClient:") : end].rstrip()
    assert ours == expected
