"""The operator's policy file and the effective grant: manifest request ∩ operator grant."""

from __future__ import annotations

from pathlib import Path

import pytest

from wasmrun.egress.patterns import parse_url
from wasmrun.egress.policy import EgressPolicy, PolicyError, load_egress_policy, parse_egress_policy

POLICY = {
    "network": {
        "skills": {
            "salesforce.*": ["https://*.salesforce.com"],
            "weather.forecast": ["https://api.weather.gov", "https://*.example.org"],
        },
        "run_code": ["https://api.example.net"],
        "max_requests": 3,
    },
    "secrets": {"modes": {"LEGACY": "env"}, "grants": {"salesforce.*": ["SALESFORCE_API_KEY"]}},
    "tenants": {
        "alice": {"network": {"skills": {"crm.*": ["https://crm.alice.example"]}}, "secrets": {"grants": {}}},
        "bob": {},
    },
}


def test_grant_is_the_intersection() -> None:
    policy = parse_egress_policy(POLICY)
    grant = policy.network.for_skill("weather.forecast", ["https://*.example.org", "https://evil.com"], {}, owner=None)
    assert grant is not None and grant.max_requests == 3
    assert grant.refusal(parse_url("https://a.example.org/x")) is None
    # requested but not granted by the operator
    assert "not allowed for skill weather.forecast" in (grant.refusal(parse_url("https://evil.com/")) or "")
    # granted by the operator but not requested by the manifest
    why = grant.refusal(parse_url("https://api.weather.gov/"))
    assert why == "api.weather.gov is not in this skill's permissions.network"


def test_no_grant_means_no_network() -> None:
    url = parse_url("https://na1.salesforce.com/")
    policy = parse_egress_policy(POLICY)
    other = policy.network.for_skill("other.skill", ["https://*.salesforce.com"], {}, owner=None)
    assert "not allowed for skill other.skill" in (other.refusal(url) or "")
    assert "permissions.network" in (policy.network.for_skill("salesforce.leads.sync", [], {}, owner=None).refusal(url) or "")
    assert "run_code has no network access" in (EgressPolicy().network.for_run_code().refusal(url) or "")
    nothing = EgressPolicy().network.for_skill("salesforce.leads.sync", ["https://*.salesforce.com"], {}, owner=None)
    assert "by the server's network policy" in (nothing.refusal(url) or "")


def test_a_tenant_grant_adds_to_everyone_s_for_that_tenant_only() -> None:
    network = parse_egress_policy(POLICY).network
    url = parse_url("https://crm.alice.example/v1")
    assert network.for_skill("crm.sync", ["https://crm.alice.example"], {}, tenant="alice", owner=None).refusal(url) is None
    assert network.for_skill("crm.sync", ["https://crm.alice.example"], {}, tenant="bob", owner=None).refusal(url) is not None
    assert network.for_skill("crm.sync", ["https://crm.alice.example"], {}, owner=None).refusal(url) is not None
    both = network.granted_for_skill("salesforce.leads.sync", "alice")
    assert both == ["https://*.salesforce.com"]
    with pytest.raises(PolicyError, match="tenants.carol.network"):
        parse_egress_policy({"tenants": {"carol": {"network": {"run_code": []}}}})


def test_run_code_gets_only_its_own_allowlist() -> None:
    grant = parse_egress_policy(POLICY).network.for_run_code()
    assert grant is not None and grant.requested is None
    assert grant.refusal(parse_url("https://api.example.net/")) is None
    assert "run_code" in (grant.refusal(parse_url("https://x.salesforce.com/")) or "")


def test_secret_modes_default_to_host_in_a_policy_file() -> None:
    policy = parse_egress_policy(POLICY)
    assert policy.secret_mode("SALESFORCE_API_KEY") == "host"
    assert policy.secret_mode("LEGACY") == "env"
    assert EgressPolicy().secret_mode("ANY") == "env"  # no policy file: today's behaviour
    assert parse_egress_policy({"secrets": {"default_mode": "env"}}).secret_mode("X") == "env"


def test_secrets_in_bodies_are_opt_in_and_only_host_held_ones() -> None:
    policy = parse_egress_policy({"secrets": {"in_bodies": ["STRIPE_KEY", "NOT_HELD"]}})
    assert policy.body_secrets == {"STRIPE_KEY", "NOT_HELD"}
    assert parse_egress_policy({}).body_secrets == frozenset()
    grant = policy.network.for_skill(
        "pay.charge", [], {"STRIPE_KEY": "sk", "OTHER": "o"}, body_secrets=policy.body_secrets, owner=None
    )
    assert grant.body_secrets == ["STRIPE_KEY"]


@pytest.mark.parametrize(
    "table, fragment",
    [
        ({"network": {"skills": {"a.*": ["ftp://api.example.com"]}}}, "network.skills"),
        ({"network": {"skills": {"a.*": "https://x.com"}}}, "list of URL patterns"),
        ({"network": {"run_code": ["https://a*.com"]}}, "network.run_code"),
        ({"network": {"allow_private_addresses": "yes"}}, "allow_private_addresses"),
        ({"network": {"max_requests": -1}}, "max_requests"),
        ({"network": {"max_requests": True}}, "max_requests"),
        ({"network": {"surprise": 1}}, "unknown keys"),
        ({"network": []}, "[network]"),
        ({"secrets": {"modes": {"X": "memory"}}}, "secrets.modes.X"),
        ({"secrets": {"default_mode": "disk"}}, "secrets.default_mode"),
        ({"secrets": {"modes": ["X"]}}, "[secrets.modes]"),
        ({"secrets": {"in_bodies": "X"}}, "secrets.in_bodies"),
        ({"secrets": {"in_bodies": ["X", 3]}}, "secrets.in_bodies"),
    ],
)
def test_bad_policies_name_the_key(table: dict, fragment: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_egress_policy(table)
    assert fragment in str(info.value)


def test_policy_file(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("not checked here")
    path = tmp_path / "policy.toml"
    path.write_text('[network]\nca_file = "ca.pem"\n[network.skills]\n"a.*" = ["https://x.example"]\n')
    policy = load_egress_policy(str(path))
    assert policy.configured and policy.network.ca_file == str(tmp_path / "ca.pem")
    path.write_text("[network\n")
    with pytest.raises(PolicyError, match="not valid TOML"):
        load_egress_policy(str(path))
    path.write_text('[network]\nca_file = "missing.pem"\n')
    with pytest.raises(PolicyError, match="ca_file"):
        load_egress_policy(str(path))
