"""execute_skill and run_code, running for real in the sandbox."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from skillfiles import GUEST_BASE_ENV, write_skill

from wasmrun.blobs.store import FileBlobStore
from wasmrun.protocol.run_result import MAX_LOGS_PREVIEW_BYTES, MAX_OUTPUT_BYTES
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import Server, assemble, create_app
from wasmrun.settings import Settings

Rpc = Callable[..., dict[str, Any]]

ENV_CODE = "import os\ndef main(args):\n    return {'env': dict(os.environ)}\n"


@pytest.fixture()
def skills_dir(skills_dir: Path) -> Path:
    write_skill(
        skills_dir, "demo.secrets", code=ENV_CODE, permissions={"secrets": ["DEMO_TOKEN", "MISSING_ONE"]}
    )
    write_skill(skills_dir, "demo.versions", "0.1.0", code="def main(args):\n    return 'old'\n")
    write_skill(skills_dir, "demo.versions", "0.2.0", code="def main(args):\n    return 'new'\n")
    write_skill(skills_dir, "demo.guide", kind="instruction", code=None)
    write_skill(
        skills_dir, "demo.fails", code="def main(args):\n    raise ValueError('bad value: ' + str(args))\n"
    )
    write_skill(
        skills_dir,
        "demo.helpers",
        code=(
            "from . import util\n\n"
            "def run(args):\n"
            "    return {'summary': 'Doubled it.', 'value': util.double(args['n'])}\n"
        ),
        runtime={"language": "python", "entrypoint": "code/main.py", "export": "run"},
        files={"code/util.py": "def double(n):\n    return 2 * n\n"},
    )
    return skills_dir


def run_code(rpc: Rpc, code: str, **params: Any) -> dict[str, Any]:
    answer = rpc("run_code", {"language": "python", "code": code, **params})
    assert "result" in answer, answer
    return answer["result"]


def create_blob(rpc: Rpc, content: str, kind: str = "text/plain") -> str:
    return rpc("create_blob", {"content": content, "kind": kind})["result"]["blob_id"]


# -- run_code ------------------------------------------------------------------


def test_run_code_result_shape(rpc: Rpc) -> None:
    result = run_code(
        rpc,
        "def main(args):\n    print('hi')\n    return {'sum': args['a'] + args['b']}\n",
        args={"a": 1, "b": 2},
    )
    assert result["status"] == "completed"
    assert result["run_id"].startswith("run_")
    assert result["output"] == {"sum": 3}
    assert result["output_blobs"] == []
    assert result["logs_preview"] == "hi\n"
    assert result["summary"].startswith("Completed in ") and result["summary"].endswith(
        "returned an object with 1 key."
    )
    assert "error" not in result
    usage = result["usage"]
    assert usage["cpu_ms"] > 0 and usage["peak_memory_bytes"] > 0 and usage["total_ms"] > 0


@pytest.mark.parametrize(
    "code, params, expected",
    [
        pytest.param("def main(args):\n    return None\n", {}, None, id="null"),
        pytest.param(
            "def go(args):\n    return 'went'\n", {"entrypoint": "go"}, "went", id="custom-entrypoint"
        ),
        pytest.param(
            "def main(args):\n    return args\n", {"args": {"x": [1, None]}}, {"x": [1, None]}, id="args"
        ),
        pytest.param("def main(args):\n    return args\n", {}, {}, id="no-args"),
    ],
)
def test_run_code_outputs(rpc: Rpc, code: str, params: dict[str, Any], expected: Any) -> None:
    result = run_code(rpc, code, **params)
    assert result["status"] == "completed" and result["output"] == expected


@pytest.mark.parametrize(
    "code, error_type, summary",
    [
        pytest.param(
            "def main(args):\n    raise ValueError('bad value')\n",
            "ValueError",
            "Failed: ValueError: bad value",
            id="exception",
        ),
        pytest.param("def main(:\n", "SyntaxError", "Failed: SyntaxError", id="syntax-error"),
        pytest.param("main = 42\n", "EntrypointNotFound", "Failed: EntrypointNotFound", id="main-not-callable"),
        pytest.param(
            "def main(args):\n    return 10**5000\n", "InvalidOutput", "Failed: InvalidOutput", id="not-json"
        ),
        pytest.param(
            "def main(args):\n    while True:\n        pass\n", "Timeout", "Failed: Timeout", id="timeout"
        ),
        pytest.param(
            "import runtime.blobs as b\ndef main(args):\n    return b.read_text('blob:' + '0' * 32)\n",
            "BlobNotFound",
            "Failed: BlobNotFound",
            id="unmounted-blob",
        ),
    ],
)
def test_run_failures_are_in_band(rpc: Rpc, code: str, error_type: str, summary: str) -> None:
    result = run_code(rpc, code, limits={"timeout_ms": 300})
    assert result["status"] == "failed"
    assert result["error"]["type"] == error_type
    assert result["summary"].startswith(summary)
    assert "output" not in result
    assert len(result["summary"]) <= 200


def test_failure_reports_guest_traceback_not_host_paths(rpc: Rpc, skills_dir: Path) -> None:
    result = rpc("execute_skill", {"name": "demo.fails", "args": {"k": 1}})["result"]
    assert result["status"] == "failed"
    assert result["summary"] == "Failed: ValueError: bad value: {'k': 1}"
    assert "Traceback" in result["error"]["message"]
    assert "/skills/demo.fails/" in result["error"]["message"]
    assert str(skills_dir) not in json.dumps(result)


@pytest.mark.parametrize(
    "params, field",
    [
        pytest.param({"language": "javascript"}, "language", id="language"),
        pytest.param({"entrypoint": "os.system"}, "entrypoint", id="entrypoint-not-a-name"),
        pytest.param(
            {"mount_skills": ["demo.versions", "no.such.skill"]}, "mount_skills[1]", id="unknown-mount"
        ),
        pytest.param({"input_blobs": ["blob:" + "1" * 32]}, "input_blobs[0]", id="unknown-blob"),
        pytest.param({"input_blobs": ["../etc/passwd"]}, "input_blobs[0]", id="malformed-blob"),
        pytest.param({"limits": {"timeout_ms": 0}}, "limits.timeout_ms", id="zero-timeout"),
        pytest.param({"args": [1, 2]}, "args", id="args-not-object"),
    ],
)
def test_run_code_protocol_errors(rpc: Rpc, params: dict[str, Any], field: str) -> None:
    answer = rpc("run_code", {"language": "python", "code": "def main(a): pass", **params})
    assert answer["error"]["code"] == -32602
    assert answer["error"]["data"]["field"] == field


def test_run_code_imports_mounted_skills(rpc: Rpc) -> None:
    code = (
        "from skills.demo.helpers import run\n"
        "from skills.demo.versions import main as version\n"
        "def main(args):\n    return [run({'n': 21})['value'], version({})]\n"
    )
    result = run_code(rpc, code, mount_skills=["demo.helpers", "demo.versions", "demo.helpers"])
    assert result["output"] == [42, "new"]


def test_unmounted_skill_is_not_importable(rpc: Rpc) -> None:
    result = run_code(rpc, "import skills.demo.helpers\ndef main(args): pass\n")
    assert result["status"] == "failed" and result["error"]["type"] == "ModuleNotFoundError"


def test_run_code_with_bundled_csv_profile(rpc: Rpc) -> None:
    blob = create_blob(rpc, "a,b\n1,x\n2,y\n", kind="text/csv")
    code = (
        "from skills.data.csv.profile import main as profile\n"
        "def main(args):\n    return profile({'blob_id': args['blob']})['rows']\n"
    )
    result = run_code(rpc, code, mount_skills=["data.csv.profile"], input_blobs=[blob], args={"blob": blob})
    assert result["output"] == 2


def test_blobs_in_and_out(rpc: Rpc, blob_store: FileBlobStore) -> None:
    blob = create_blob(rpc, "some text")
    code = (
        "from runtime import blobs\n"
        "def main(args):\n"
        "    text = blobs.read_text(args['blob'])\n"
        "    return {'copy': blobs.write_text(text.upper())}\n"
    )
    result = run_code(rpc, code, args={"blob": blob}, input_blobs=[blob])
    written = result["output"]["copy"]
    assert result["output_blobs"] == [written]
    assert result["summary"].endswith("wrote 1 blob.")
    assert rpc("read_blob", {"blob_id": written})["result"]["content"] == "SOME TEXT"
    info = blob_store.info(written)
    assert info is not None and info.run_id == result["run_id"]


@pytest.mark.parametrize(
    "length, stored",
    [
        pytest.param(MAX_OUTPUT_BYTES - 2, False, id="exactly-4096-serialized"),
        pytest.param(MAX_OUTPUT_BYTES - 1, True, id="one-byte-over"),
    ],
)
def test_output_size_boundary(rpc: Rpc, length: int, stored: bool) -> None:
    result = run_code(rpc, f"def main(args):\n    return 'x' * {length}\n")
    if not stored:
        assert result["output"] == "x" * length and result["output_blobs"] == []
        return
    pointer = result["output"]
    assert set(pointer) == {"output_blob", "size_bytes", "kind", "preview"}
    assert pointer["size_bytes"] == length + 2 and pointer["kind"] == "application/json"
    assert result["output_blobs"] == [pointer["output_blob"]]
    assert len(json.dumps(pointer).encode()) <= MAX_OUTPUT_BYTES
    full = rpc("read_blob", {"blob_id": pointer["output_blob"], "mode": "full"})["result"]
    assert json.loads(full["content"]) == "x" * length
    assert "stored in " + pointer["output_blob"] in result["summary"]


def test_large_structured_output_is_not_lost(rpc: Rpc) -> None:
    code = (
        "def main(args):\n"
        "    return {'summary': 'Made rows.', 'rows': [{'i': i, 'é': '😀' * 3} for i in range(500)]}\n"
    )
    result = run_code(rpc, code)
    assert result["summary"] == "Made rows."
    pointer = result["output"]
    assert len(json.dumps(pointer, ensure_ascii=False).encode()) <= MAX_OUTPUT_BYTES
    full = rpc("read_blob", {"blob_id": pointer["output_blob"], "mode": "full"})["result"]["content"]
    assert json.loads(full)["rows"][499] == {"i": 499, "é": "😀😀😀"}
    assert full.startswith(pointer["preview"])


@pytest.mark.parametrize(
    "summary, used",
    [
        pytest.param("Synced 742 leads (5 failed).", True, id="short"),
        pytest.param("x" * 201, False, id="too-long"),
        pytest.param("two\nlines", False, id="multi-line"),
        pytest.param("   ", False, id="blank"),
        pytest.param(42, False, id="not-a-string"),
    ],
)
def test_skill_summary(rpc: Rpc, summary: Any, used: bool) -> None:
    result = run_code(rpc, f"def main(args):\n    return {{'summary': {summary!r}}}\n")
    assert (result["summary"] == summary) is used
    if not used:
        assert result["summary"].startswith("Completed in ")


def test_logs_preview_keeps_head_and_tail(rpc: Rpc) -> None:
    code = "def main(args):\n    for i in range(5000):\n        print(f'line {i} ✓')\n"
    preview = run_code(rpc, code)["logs_preview"]
    assert len(preview.encode()) <= MAX_LOGS_PREVIEW_BYTES
    assert preview.startswith("line 0 ✓\nline 1 ✓\n")
    assert preview.endswith("line 4999 ✓\n")
    assert "bytes of logs cut ...]" in preview


def test_logs_include_runtime_log(rpc: Rpc) -> None:
    code = "from runtime import log\ndef main(args):\n    print('a')\n    log.info('b')\n    log.error('c')\n"
    assert run_code(rpc, code)["logs_preview"] == "a\n[INFO] b\n[ERROR] c\n"


def test_run_code_gets_no_secrets(rpc: Rpc) -> None:
    assert run_code(rpc, ENV_CODE)["output"] == {"env": GUEST_BASE_ENV}
    mounted = run_code(rpc, "from skills.demo.secrets import main\n", mount_skills=["demo.secrets"])
    assert mounted["output"] == {"env": GUEST_BASE_ENV}


# -- execute_skill ---------------------------------------------------------------


def test_execute_injects_only_the_named_secrets(rpc: Rpc) -> None:
    result = rpc("execute_skill", {"name": "demo.secrets"})["result"]
    # No policy file: the secret is in the environment (env mode), and its value
    # is replaced by its placeholder in what the run returns.
    assert result["output"] == {"env": {**GUEST_BASE_ENV, "DEMO_TOKEN": "wasmrun-secret:DEMO_TOKEN"}}
    assert "s3cret" not in json.dumps(result)


@pytest.mark.parametrize(
    "version, expected",
    [pytest.param(None, "new", id="latest"), pytest.param("0.1.0", "old", id="pinned")],
)
def test_execute_version(rpc: Rpc, version: str | None, expected: str) -> None:
    result = rpc("execute_skill", {"name": "demo.versions", "version": version})["result"]
    assert result["output"] == expected


def test_execute_export_and_relative_imports(rpc: Rpc) -> None:
    result = rpc("execute_skill", {"name": "demo.helpers", "args": {"n": 4}})["result"]
    assert result["output"] == {"summary": "Doubled it.", "value": 8}
    assert result["summary"] == "Doubled it."


def test_execute_bundled_csv_profile(rpc: Rpc) -> None:
    blob = create_blob(rpc, "name,score\nann,3\nbob,5\n", kind="text/csv")
    result = rpc(
        "execute_skill", {"name": "data.csv.profile", "args": {"blob_id": blob}, "input_blobs": [blob]}
    )["result"]
    assert result["status"] == "completed", result
    assert result["output"]["rows"] == 2


def test_execute_timeout(rpc: Rpc, skills_dir: Path, context: Any) -> None:
    write_skill(skills_dir, "demo.spin", code="def main(args):\n    while True:\n        pass\n")
    context.registry.reload()
    result = rpc("execute_skill", {"name": "demo.spin", "timeout_ms": 100})["result"]
    assert result["status"] == "failed" and result["error"]["type"] == "Timeout"


@pytest.mark.parametrize(
    "params, field, words",
    [
        pytest.param({"name": "demo.guide"}, "name", "instruction skill", id="instruction-skill"),
        pytest.param({"name": "skills.protocol.guide"}, "name", "instruction skill", id="the-guide"),
        pytest.param({"name": "no.such"}, "name", "no skill named", id="unknown"),
        pytest.param(
            {"name": "demo.versions", "version": "3.0.0"}, "version", "no version", id="unknown-version"
        ),
        pytest.param(
            {"name": "demo.versions", "input_blobs": ["blob:" + "2" * 32]},
            "input_blobs[0]",
            "does not exist",
            id="unknown-blob",
        ),
        pytest.param({"name": "demo.versions", "timeout_ms": -5}, "timeout_ms", "", id="negative-timeout"),
    ],
)
def test_execute_protocol_errors(rpc: Rpc, params: dict[str, Any], field: str, words: str) -> None:
    error = rpc("execute_skill", params)["error"]
    assert error["code"] == -32602
    assert error["data"]["field"] == field
    assert words in error["message"]


# -- concurrency ------------------------------------------------------------------


def test_busy_server_answers_32000_instead_of_hanging(
    settings: Settings, blob_store: FileBlobStore, tmp_path: Path
) -> None:
    one_slot = InProcessExecutor(blob_store, slots=1, queue_timeout=0.2, workspace_root=tmp_path)
    app = create_app(assemble(settings, blobs=blob_store, executor=one_slot))
    spin = {
        "language": "python",
        "code": "def main(a):\n    while True: pass\n",
        "limits": {"timeout_ms": 1500},
    }

    async def both() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
            calls = [
                http.post("/rpc", json={"jsonrpc": "2.0", "id": i, "method": "run_code", "params": spin})
                for i in range(2)
            ]
            return [r.json() for r in await asyncio.gather(*calls)]

    try:
        answers = sorted(asyncio.run(both()), key=lambda a: "error" in a)
    finally:
        one_slot.close()
    assert answers[0]["result"]["error"]["type"] == "Timeout"
    assert answers[1]["error"]["code"] == -32000
    assert "busy" in answers[1]["error"]["message"]


def test_runs_do_not_block_the_event_loop(server: Server) -> None:
    app = create_app(server)
    spin = {
        "language": "python",
        "code": "def main(a):\n    while True: pass\n",
        "limits": {"timeout_ms": 800},
    }

    async def race() -> float:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://localhost") as http:
            loop = asyncio.get_running_loop()
            run = asyncio.create_task(
                http.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": "run_code", "params": spin})
            )
            await asyncio.sleep(0.1)
            start = loop.time()
            quick = await http.post("/rpc", json={"jsonrpc": "2.0", "id": 2, "method": "list_skills"})
            elapsed = loop.time() - start
            assert "result" in quick.json()
            await run
            return elapsed

    assert asyncio.run(race()) < 0.3


def test_run_code_lists_the_root_and_exactly_the_mounted_skills(rpc: Rpc) -> None:
    code = (
        "import os\n"
        "def main(args):\n"
        "    return [sorted(os.listdir('/')), sorted(os.listdir('/skills')), sorted(os.listdir('/skills/demo.guide'))]\n"
    )
    result = run_code(rpc, code, mount_skills=["demo.versions", "demo.guide"])
    assert result["status"] == "completed", result
    root, skills, guide = result["output"]
    assert {"home", "skills", "tmp", "workspace"} <= set(root)  # and the image's own (lib or usr)
    assert skills == ["demo.guide", "demo.versions"]
    assert "SKILL.md" in guide


# -- secrets are the operator's to grant ------------------------------------------


def _create_env_skill(rpc: Rpc, name: str, version: str, secrets: list[str]) -> None:
    manifest = {
        "name": name, "version": version, "description": "Shows its environment.", "kind": "action",
        "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"},
        "permissions": {"secrets": secrets},
    }
    answer = rpc("create_skill", {
        "manifest": manifest, "skill_md": f"# {name}\n", "files": [{"path": "code/main.py", "content": ENV_CODE}],
    })
    assert answer.get("result") == {"name": name, "version": version}, answer


def test_a_created_skill_cannot_grant_itself_a_secret(rpc: Rpc) -> None:
    _create_env_skill(rpc, "user.leak", "1.0.0", ["DEMO_TOKEN", "OTHER_TOKEN"])
    result = rpc("execute_skill", {"name": "user.leak"})["result"]
    assert result["status"] == "completed", result
    assert result["output"] == {"env": GUEST_BASE_ENV}
    assert "s3cret" not in json.dumps(result) and "not-for-you" not in json.dumps(result)


def test_a_manifest_asking_for_an_ungranted_secret_gets_none(rpc: Rpc, skills_dir: Path) -> None:
    # demo.* is granted DEMO_TOKEN only: the operator's skill asking for OTHER_TOKEN too gets DEMO_TOKEN alone.
    write_skill(skills_dir, "demo.asks", code=ENV_CODE, permissions={"secrets": ["DEMO_TOKEN", "OTHER_TOKEN"]})
    result = rpc("execute_skill", {"name": "demo.asks"})["result"]
    # (the value is replaced by its placeholder in what the run returns)
    assert result["output"] == {"env": {**GUEST_BASE_ENV, "DEMO_TOKEN": "wasmrun-secret:DEMO_TOKEN"}}


def test_an_everyone_grant_does_not_reach_a_created_skill_of_a_matching_name(rpc: Rpc) -> None:
    # Grants follow ownership: "demo.*" was written for the operator's demo skills.
    _create_env_skill(rpc, "demo.mine", "1.0.0", ["DEMO_TOKEN", "OTHER_TOKEN"])
    result = rpc("execute_skill", {"name": "demo.mine"})["result"]
    assert result["status"] == "completed" and result["output"] == {"env": GUEST_BASE_ENV}, result
