"""`from skills.<name> import fn` imports a mounted skill's entrypoint module."""

from __future__ import annotations

import pytest

from tests.sandbox.conftest import make_skill
from wasmrun.sandbox.contract.types import RunRequest


@pytest.fixture()
def leads(tmp_path):
    return make_skill(tmp_path, "salesforce.leads.sync", {
        "code/main.py": (
            "from . import helpers\n"
            "def sync_leads(rows, env='dev'):\n"
            "    return {'count': helpers.count(rows), 'env': env}\n"
            "def main(args):\n"
            "    return sync_leads(args['rows'], args.get('env', 'dev'))\n"
        ),
        "code/helpers.py": "def count(rows):\n    return len(rows)\n",
    })


@pytest.fixture()
def sheets(tmp_path):
    return make_skill(tmp_path, "gdrive.sheets.read", {
        "code/entry.py": "def read_sheet(url):\n    return [url, url]\n",
    }, entrypoint="code/entry.py")


def test_import_dotted_skill_name(run_code, leads, sheets):
    code = (
        "from skills.salesforce.leads.sync import sync_leads\n"
        "from skills.gdrive.sheets.read import read_sheet\n"
        "def main(args):\n"
        "    return sync_leads(read_sheet(args['url']), env='prod')\n"
    )
    result = run_code(code, args={"url": "u"}, skills=[leads, sheets])
    assert result.status == "completed", result.error
    assert result.output == {"count": 2, "env": "prod"}


def test_skill_folder_is_mounted_read_only(run_code, leads):
    code = (
        "import os\n"
        "def main(args):\n"
        "    root = '/skills/salesforce.leads.sync'\n"
        "    listing = sorted(os.listdir(root + '/code'))\n"
        "    try:\n"
        "        open(root + '/code/new.py', 'w')\n"
        "    except OSError as exc:\n"
        "        return listing, type(exc).__name__\n"
    )
    result = run_code(code, skills=[leads])
    listing, error = result.output
    assert "main.py" in listing and "helpers.py" in listing
    assert error in ("PermissionError", "OSError")


def test_unmounted_skill_is_not_importable(run_code, leads):
    result = run_code("from skills.gdrive.sheets.read import read_sheet\ndef main(args): pass", skills=[leads])
    assert result.status == "failed"
    assert result.error.type == "ModuleNotFoundError"


def test_only_mounted_skills_are_visible(run_code, leads):
    code = "import os\ndef main(args):\n    return os.listdir('/skills')"
    result = run_code(code, skills=[leads])
    # Each skill is its own preopen: there is no /skills directory to list.
    assert result.status == "failed" or result.output == ["salesforce.leads.sync"]


def test_execute_skill_export(engine, leads):
    request = RunRequest(kind="skill", skill=leads.name, function="main", args_json=b'{"rows":[1,2,3]}', skills=[leads])
    result = engine.run(request)
    assert result.output == {"count": 3, "env": "dev"}


def test_execute_skill_missing_export(engine, leads):
    request = RunRequest(kind="skill", skill=leads.name, function="nope", skills=[leads])
    result = engine.run(request)
    assert result.error.type == "EntrypointNotFound"
    assert "salesforce.leads.sync" in result.error.message


def test_skill_code_dir_is_on_path_for_execute_skill(engine, tmp_path):
    skill = make_skill(tmp_path, "plain", {
        "code/main.py": "import util\ndef main(args):\n    return util.VALUE\n",
        "code/util.py": "VALUE = 'absolute import works'\n",
    })
    result = engine.run(RunRequest(kind="skill", skill="plain", skills=[skill]))
    assert result.output == "absolute import works"
