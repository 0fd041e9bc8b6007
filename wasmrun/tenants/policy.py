"""The operator's policy file, as far as access goes: which skills get which secrets
(for which tenant), which hosts and origins the server answers to, and the
tenants' default limits.

    # wasmrun serve --policy-file policy.toml
    allowed_hosts = ["wasmrun.internal", "wasmrun.internal:8080"]
    allowed_origins = ["https://agents.example.com"]

    [secrets.grants]                     # every tenant's runs of the operator's skills
    "data.*" = ["WAREHOUSE_TOKEN"]
    "report.*" = { secrets = ["REPORT_KEY"], owner = "any" }   # tenants' created report.* too

    [tenants.alice.secrets.grants]       # only tenant alice's runs (her created skills too)
    "user.report" = ["REPORT_KEY"]

    [limits]                             # every tenant's defaults (tenants/limits.py)
    concurrent_runs = 2

A skill's manifest (`permissions.secrets`) only asks: a run gets a secret when
the skill asks for it AND a grant here names the skill (exactly or by an
fnmatch pattern such as `data.*`) AND reaches its owner (egress/grants.py: an
everyone grant reaches only the operator's skills unless it says `owner`) AND
the secret is configured.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wasmrun.egress.grants import EVERYONE_DEFAULT, SECRET_NAME, TENANT_DEFAULT, Grants, granted, parse_grants
from wasmrun.tenants.limits import TenantLimits


@dataclass(frozen=True)
class AccessPolicy:
    secret_grants: Grants = ()
    tenant_secret_grants: Mapping[str, Grants] = field(default_factory=dict)
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    limits: TenantLimits = field(default_factory=TenantLimits)  # every tenant's, unless set per tenant

    def granted(self, tenant: str, skill: str, owner: str | None) -> frozenset[str]:
        """The secret names the operator grants to `tenant`'s runs of `skill`, created
        by `owner` (None: the operator's; a tenant only runs the operator's and its own)."""
        grants = (*self.secret_grants, *self.tenant_secret_grants.get(tenant, ()))
        return frozenset(granted(grants, skill, owner))


def load_access_policy(path: Path | None) -> AccessPolicy:
    if path is None:
        return AccessPolicy()
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    # [network] and the secret modes in [secrets] are the egress policy's (egress/policy.py).
    # [packages] is the on-demand packages' policy (packages/policy.py, read by settings.py).
    known = {"secrets", "tenants", "allowed_hosts", "allowed_origins", "limits", "network", "packages"}
    if unknown := sorted(set(doc) - known):
        raise ValueError(f"{path}: unknown keys {unknown} (known: {sorted(known)})")
    tenants = doc.get("tenants", {})
    if not isinstance(tenants, dict):
        raise ValueError(f"{path}: [tenants] must be a table")
    per_tenant: dict[str, Grants] = {}
    for name, table in tenants.items():
        if not isinstance(name, str) or not isinstance(table, dict):
            raise ValueError(f"{path}: [tenants.{name}] is not a tenant table")
        per_tenant[name] = _grants(table.get("secrets", {}), f"{path}: tenants.{name}.secrets", TENANT_DEFAULT)
    return AccessPolicy(
        secret_grants=_grants(doc.get("secrets", {}), f"{path}: secrets", EVERYONE_DEFAULT),
        tenant_secret_grants=per_tenant,
        allowed_hosts=_strings(doc.get("allowed_hosts", []), f"{path}: allowed_hosts"),
        allowed_origins=_strings(doc.get("allowed_origins", []), f"{path}: allowed_origins"),
        limits=_limits(doc.get("limits", {}), f"{path}: limits"),
    )


def _limits(table: Any, where: str) -> TenantLimits:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table of name = number")
    try:
        return TenantLimits().with_values(table)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _grants(table: Any, where: str, default_owner: str) -> Grants:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table")
    grants = table.get("grants", {})
    if not isinstance(grants, dict):
        raise ValueError(f"{where}.grants must be a table of \"pattern\" = [\"SECRET\", ...]")
    return parse_grants(grants, f"{where}.grants", values_key="secrets", check=_secret_names, default_owner=default_owner)


def _secret_names(value: Any, where: str) -> tuple[str, ...]:
    checked = _strings(value, where)
    if bad := [n for n in checked if not SECRET_NAME.fullmatch(n)]:
        raise ValueError(f"{where}: not secret names: {bad}")
    return checked


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{where} must be a list of strings")
    return tuple(value)
