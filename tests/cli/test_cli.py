"""The `wasmrun` command and the settings it builds: flags over WASMRUN_* over defaults."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from skillfiles import write_skill

from wasmrun.cli.main import main
from wasmrun.settings import BUNDLED_SKILLS, Settings


@pytest.fixture()
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No WASMRUN_* from the outside; data lands in tmp_path."""
    for key in list(os.environ):
        if key.startswith("WASMRUN_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("WASMRUN_IMAGE", "stdlib")  # "auto" would pick the data image where it is built
    return tmp_path


# -- settings ----------------------------------------------------------------------


def test_defaults(isolated: Path) -> None:
    s = Settings.load()
    assert (s.host, s.port) == ("127.0.0.1", 8080)
    assert s.data_dir == isolated / "xdg" / "wasmrun"
    assert s.skills_dirs == (BUNDLED_SKILLS,)
    assert s.skills_home == s.data_dir / "skills"
    assert s.workers >= 1 and s.secrets == {}


def test_environment_then_flags(isolated: Path) -> None:
    env = {
        "WASMRUN_HOST": "0.0.0.0",
        "WASMRUN_PORT": "9000",
        "WASMRUN_DATA_DIR": "/srv/wr",
        "WASMRUN_SKILLS_DIRS": os.pathsep.join(["/a", "/b"]),
        "WASMRUN_WORKERS": "3",
        "WASMRUN_QUEUE_TIMEOUT": "0.5",
        "WASMRUN_MAX_BODY_BYTES": "1000",
        "WASMRUN_MAX_FULL_READ_BYTES": "10",
    }
    s = Settings.load(env)
    assert (s.host, s.port, s.data_dir, s.workers) == ("0.0.0.0", 9000, Path("/srv/wr"), 3)
    assert s.skills_dirs == (BUNDLED_SKILLS, Path("/a"), Path("/b"))
    assert (s.queue_timeout, s.max_body_bytes, s.max_full_read_bytes) == (0.5, 1000, 10)
    flagged = Settings.load(env, host="::1", port=1, data_dir=Path("/x"), skills_dirs=[Path("/c")], workers=1)
    assert (flagged.host, flagged.port, flagged.data_dir, flagged.workers) == ("::1", 1, Path("/x"), 1)
    assert flagged.skills_dirs == (BUNDLED_SKILLS, Path("/c"))


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({"WASMRUN_PORT": "http"}, id="port-not-int"),
        pytest.param({"WASMRUN_WORKERS": "0"}, id="no-workers"),
    ],
)
def test_bad_settings_are_reported(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Settings.load(env)


def test_secrets_from_file_and_environment(tmp_path: Path) -> None:
    file = tmp_path / "secrets.toml"
    file.write_text('API_KEY = "from-file"\nSHARED = "file"\n')
    file.chmod(0o600)
    s = Settings.load({"WASMRUN_SECRET_SHARED": "env", "WASMRUN_SECRET_TOKEN": "t"}, secrets_file=file)
    assert s.secrets == {"API_KEY": "from-file", "SHARED": "env", "TOKEN": "t"}
    assert "from-file" not in repr(s)


def test_policy_file_from_flag_or_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "policy.toml"
    file.write_text('[network.skills]\n"salesforce.*" = ["https://*.salesforce.com"]\n[secrets.modes]\nOLD = "env"\n')
    for s in (Settings.load({}, policy_file=file), Settings.load({"WASMRUN_POLICY_FILE": str(file)})):
        assert s.egress.network.granted_for_skill("salesforce.leads.sync") == ["https://*.salesforce.com"]
        assert s.egress.secret_mode("NEW") == "host" and s.egress.secret_mode("OLD") == "env"
    assert Settings.load({}).egress.secret_mode("NEW") == "env"  # no policy file: today's behaviour
    file.write_text('[network.skills]\n"salesforce.*" = ["ftp://*.salesforce.com"]\n')
    with pytest.raises(ValueError, match=r"network.skills.'salesforce.\*'"):
        Settings.load({}, policy_file=file)
    assert main(["serve", "--policy-file", str(file), "--data-dir", str(tmp_path / "data")]) == 2
    assert "must start with http:// or https://" in capsys.readouterr().err


# -- wasmrun run ---------------------------------------------------------------------


def test_run_prints_the_result(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = isolated / "job.py"
    script.write_text("def main(args):\n    print('working')\n    return {'got': args}\n")
    code = main(
        [
            "run",
            str(script),
            "--arg",
            "n=3",
            "--arg",
            "name=ann",
            "--arg",
            'j={"a": [1]}',
            "--data-dir",
            str(isolated / "data"),
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["status"] == "completed"
    assert result["output"] == {"got": {"n": 3, "name": "ann", "j": {"a": [1]}}}
    assert result["logs_preview"] == "working\n"


def test_run_with_a_mounted_skill(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = isolated / "skills"
    write_skill(extra, "demo.add", code="def main(args):\n    return args['a'] + args['b']\n")
    script = isolated / "job.py"
    script.write_text(
        "from skills.demo.add import main as add\ndef go(args):\n    return add({'a': 2, 'b': 5})\n"
    )
    code = main(
        [
            "run",
            str(script),
            "--mount",
            "demo.add",
            "--entrypoint",
            "go",
            "--skills-dir",
            str(extra),
            "--data-dir",
            str(isolated / "data"),
        ]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out)["output"] == 7


def test_run_failure_exits_1(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = isolated / "job.py"
    script.write_text("def main(args):\n    1 / 0\n")
    assert main(["run", str(script), "--data-dir", str(isolated / "data")]) == 1
    assert json.loads(capsys.readouterr().out)["error"]["type"] == "ZeroDivisionError"


@pytest.mark.parametrize(
    "argv, words",
    [
        pytest.param(["--mount", "no.such.skill"], "no skill named 'no.such.skill'", id="unknown-mount"),
        pytest.param(["--arg", "novalue"], "KEY=VALUE", id="bad-arg"),
        pytest.param(["--blob", "novalue"], "NAME=PATH", id="bad-blob"),
        pytest.param(["--blob", "x=/no/such/file"], "/no/such/file", id="missing-blob-file"),
        pytest.param(["--arg", "x=1", "--blob", "x=job.py"], "twice", id="same-name"),
    ],
)
def test_run_usage_errors_exit_2(
    isolated: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    script = isolated / "job.py"
    script.write_text("def main(args): pass\n")
    assert main(["run", str(script), "--data-dir", str(isolated / "data"), *argv]) == 2
    assert words in capsys.readouterr().err


def test_run_with_blob_files(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3
    import zipfile

    archive = isolated / "in.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("a.txt", "zipped é")
    db = sqlite3.connect(isolated / "in.db")
    db.execute("CREATE TABLE t (v)")
    db.execute("INSERT INTO t VALUES (7)")
    db.commit()
    db.close()
    script = isolated / "job.py"
    script.write_text(
        "import sqlite3, zipfile\n"
        "from runtime import blobs\n"
        "def main(args):\n"
        "    text = zipfile.ZipFile('/blobs/' + args['archive']).read('a.txt').decode()\n"
        "    v = sqlite3.connect('/blobs/' + args['db']).execute('SELECT v FROM t').fetchone()[0]\n"
        "    return [text, v, blobs.size(args['db'])]\n"
    )
    data = isolated / "data"
    argv = ["run", str(script), "--blob", f"archive={archive}", "--blob", f"db={isolated / 'in.db'}"]
    code = main([*argv, "--data-dir", str(data)])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert json.loads(captured.out)["output"] == ["zipped é", 7, (isolated / "in.db").stat().st_size]
    assert f"data in {data}" in captured.err


def test_run_missing_file_exits_2(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(isolated / "nope.py")]) == 2
    assert "nope.py" in capsys.readouterr().err


# -- wasmrun skills ------------------------------------------------------------------


def test_skills_list(isolated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = isolated / "skills"
    write_skill(extra, "demo.add")
    assert main(["skills", "list", "--skills-dir", str(extra), "--data-dir", str(isolated / "data")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["OWNER", "NAME", "VERSION", "KIND", "DESCRIPTION"]
    names = [line.split()[1] for line in lines[1:]]
    assert "demo.add" in names and "skills.protocol.guide" in names


def test_skills_check_bundled_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["skills", "check", str(BUNDLED_SKILLS)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "skills.protocol.guide" in out


def test_skills_check_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_skill(tmp_path, "demo.good")
    bad = write_skill(
        tmp_path, "demo.bad", runtime={"language": "python", "entrypoint": "code/gone.py"}, version="1.0"
    )
    (bad / "SKILL.md").unlink()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "skill.toml").write_text("this is [not toml")
    assert main(["skills", "check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"ok       {tmp_path / 'demo.good' / '0.1.0'}" in out
    assert f"INVALID  {bad}" in out
    assert "version '1.0' is not a semantic version" in out
    assert "SKILL.md is missing" in out
    assert "not valid TOML" in out


def test_skills_check_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["skills", "check", str(tmp_path)]) == 0
    assert "no skills" in capsys.readouterr().out


def test_policy_file_grants_secrets_per_skill_and_tenant(tmp_path: Path) -> None:
    from wasmrun.tenants.policy import load_access_policy

    file = tmp_path / "policy.toml"
    file.write_text(
        'allowed_hosts = ["wasmrun.internal"]\n'
        '[secrets.grants]\n"data.*" = ["KEY"]\n'
        '[tenants.alice.secrets.grants]\n"user.report" = ["REPORT"]\n'
    )
    policy = Settings.load({}, policy_file=file).access
    assert policy == load_access_policy(file)
    assert policy.granted("bob", "data.csv.profile", None) == {"KEY"}
    assert policy.granted("bob", "user.report", None) == set()
    assert policy.granted("alice", "user.report", None) == {"REPORT"}
    assert policy.allowed_hosts == ("wasmrun.internal",)
    file.write_text('[secrets.grants]\n"x" = "KEY"\n')
    with pytest.raises(ValueError, match="list of strings"):
        load_access_policy(file)
