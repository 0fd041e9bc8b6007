"""A skill's pages over HTTP: a skill's later runs skip its import, and
what a run's import would read from its grant (secrets) is still its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from skillfiles import write_skill

from wasmrun.sandbox import InProcessExecutor

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

Rpc = Callable[..., dict[str, Any]]

PRINTS = "print('importing demo.imports')\nSTATE = []\ndef main(args):\n    STATE.append(args)\n    return len(STATE)\n"
READS_ENV = "import os\nTOKEN = os.environ.get('DEMO_TOKEN', '')\ndef main(args):\n    return len(TOKEN)\n"


@pytest.fixture()
def skills_dir(skills_dir: Path) -> Path:
    write_skill(skills_dir, "demo.imports", code=PRINTS)
    write_skill(skills_dir, "demo.envimport", code=READS_ENV, permissions={"secrets": ["DEMO_TOKEN"]})
    # Deeper than a run mounts a skill (files/skillstamp.py): its runs are refused, clearly.
    write_skill(skills_dir, "demo.deep", code=PRINTS, files={"/".join(["d"] * 33) + "/leaf.txt": "x"})
    return skills_dir


def test_execute_skill_later_runs_skip_the_import(rpc: Rpc, executor: InProcessExecutor) -> None:
    first = rpc("execute_skill", {"name": "demo.imports", "args": {"n": 1}})["result"]
    assert first["status"] == "completed" and "importing demo.imports" in first["logs_preview"]
    assert executor.engine.skill_pages.wait_ready(120)
    for n in range(2, 4):
        later = rpc("execute_skill", {"name": "demo.imports", "args": {"n": n}})["result"]
        assert later["status"] == "completed" and later["output"] == 1  # nothing of the last run
        assert "importing demo.imports" not in later["logs_preview"]


def test_a_skill_reading_its_secret_at_import_still_sees_it(rpc: Rpc, executor: InProcessExecutor) -> None:
    for _ in range(3):
        result = rpc("execute_skill", {"name": "demo.envimport"})["result"]
        assert result["status"] == "completed" and result["output"] == len("s3cret")
        assert executor.engine.skill_pages.wait_ready(120)


def test_a_skill_too_deep_to_mount_is_refused_and_the_server_keeps_serving(rpc: Rpc, skills_dir: Path) -> None:
    code = "import skills.demo.deep\ndef main(args):\n    return 1\n"
    for method, params in (
        ("execute_skill", {"name": "demo.deep"}),
        ("run_code", {"language": "python", "code": code, "mount_skills": ["demo.deep"]}),
    ):
        answer = rpc(method, params)
        assert "error" not in answer, answer  # a failed run, not a refused request
        result = answer["result"]
        assert result["status"] == "failed" and result["error"]["type"] == "SkillTooLarge"
        assert "skill demo.deep is too large to mount" in result["error"]["message"]
        assert "more than 32 levels deep" in result["error"]["message"]
        assert str(skills_dir) not in str(result) and "importing" not in result["logs_preview"]
    assert rpc("execute_skill", {"name": "demo.imports", "args": {}})["result"]["status"] == "completed"
