"""Grants follow ownership (wasmrun/egress/grants.py): one rule for every grant form."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from wasmrun.egress.policy import PolicyError, parse_egress_policy
from wasmrun.tenants.policy import load_access_policy

OPERATOR, ALICE = None, "alice"


def _access(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return load_access_policy(path)


@pytest.mark.parametrize(
    "skill, owner, tenant, expected",
    [
        ("data.x", OPERATOR, "bob", {"WH"}),  # the operator's skill: the everyone grant
        ("data.evil", "bob", "bob", set()),  # bob's created skill of a matching name: nothing
        ("data.evil", ALICE, ALICE, {"OWN"}),  # alice's own section reaches her created skill
        ("data.x", OPERATOR, ALICE, {"WH", "OWN"}),  # and her runs of the operator's
        ("report.q", "bob", "bob", {"REPORT"}),  # owner = "any": created skills too
        ("report.q", OPERATOR, "bob", {"REPORT"}),
        ("hook.q", "bob", "bob", {"HOOK"}),  # owner = "tenant": created skills only
        ("hook.q", OPERATOR, "bob", set()),
        ("ops.q", ALICE, ALICE, set()),  # alice's section, owner = "operator": not her own skills
        ("ops.q", OPERATOR, ALICE, {"OPS"}),
    ],
)
def test_secret_grants_follow_ownership(
    tmp_path: Path, skill: str, owner: str | None, tenant: str, expected: set[str]
) -> None:
    access = _access(tmp_path, """
[secrets.grants]
"data.*" = ["WH"]
"report.*" = { secrets = ["REPORT"], owner = "any" }
"hook.*" = { secrets = ["HOOK"], owner = "tenant" }
[tenants.alice.secrets.grants]
"data.*" = ["OWN"]
"ops.*" = { secrets = ["OPS"], owner = "operator" }
""")
    assert access.granted(tenant, skill, owner) == expected


def test_network_grants_follow_the_same_rule() -> None:
    policy = parse_egress_policy({
        "network": {"skills": {
            "data.*": ["https://wh.example"],
            "hook.*": {"urls": ["https://hooks.example"], "owner": "any"},
        }},
        "tenants": {"alice": {"network": {"skills": {"data.*": ["https://alice.example"]}}}},
    }).network
    assert policy.granted_for_skill("data.x", "bob", None) == ["https://wh.example"]
    assert policy.granted_for_skill("data.evil", "bob", "bob") == []
    assert policy.granted_for_skill("data.evil", "alice", "alice") == ["https://alice.example"]
    assert policy.granted_for_skill("hook.a", "bob", "bob") == ["https://hooks.example"]
    grant = policy.for_skill("data.evil", ["https://wh.example"], {}, tenant="bob", owner="bob")
    assert grant.granted == []


@pytest.mark.parametrize(
    "table, message",
    [
        ({"a.*": {"urls": ["https://x.example"], "owner": "everyone"}}, "owner must be one of"),
        ({"a.*": {"urls": ["https://x.example"], "who": "any"}}, "unknown keys"),
        ({"a.*": {"owner": "any"}}, "needs urls"),
        ({"a.*": {"urls": "https://x.example"}}, "must be a list"),
        ({"a.*": {"urls": ["ftp://x.example"]}}, "a.*"),
    ],
)
def test_a_malformed_network_grant_is_refused_naming_it(table: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_egress_policy({"network": {"skills": table}})


@pytest.mark.parametrize(
    "text, message",
    [
        ('[secrets.grants]\n"a.*" = { secrets = ["K"], owner = "all" }\n', "owner must be one of"),
        ('[secrets.grants]\n"a.*" = { secrets = ["bad name"] }\n', "not secret names"),
        ('[secrets.grants]\n"a.*" = { owner = "any" }\n', "needs secrets"),
        ('[tenants.a.secrets.grants]\n"a.*" = { secrets = ["K"], extra = 1 }\n', "unknown keys"),
    ],
)
def test_a_malformed_secret_grant_is_refused_naming_it(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _access(tmp_path, text)
