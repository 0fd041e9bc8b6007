"""Who a grant reaches: the one rule for every grant in the operator's policy file.

A grant names skills by an fnmatch pattern (`"data.*"`) and gives them secrets
(`[secrets.grants]`) or URL patterns (`[network.skills]`). A skill *name* says
nothing about who wrote the code: any tenant can `create_skill` a
`data.evil`. So a grant also says whose skills it reaches, and follows
ownership:

- a grant in an everyone section (`[secrets.grants]`, `[network.skills]`)
  reaches the **operator's** skills (the bundled and --skills-dir folders) only,
  unless it says otherwise;
- a grant in one tenant's section (`[tenants.NAME.secrets.grants]`,
  `[tenants.NAME.network.skills]`) reaches that tenant's runs of the operator's
  skills **and** of the skills that tenant created: the operator named the tenant.

The long form says it explicitly, in either kind of section:

    [secrets.grants]
    "data.*" = ["WAREHOUSE_TOKEN"]                                 # operator's data.* only
    "report.*" = { secrets = ["REPORT_KEY"], owner = "any" }       # tenants' created report.* too
    [network.skills]
    "crm.*" = { urls = ["https://crm.example"], owner = "tenant" } # created crm.* only

`owner` is "operator" (the operator's skills), "tenant" (skills a tenant created,
run by that tenant) or "any" (both). A tenant can only ever run the operator's
skills and its own, so "tenant" never reaches another tenant's skill.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# A secret's name, as a manifest declares it and a grant gives it (the guest sees
# `wasmrun-secret:NAME`).
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)

OWNERS = ("operator", "tenant", "any")
EVERYONE_DEFAULT = "operator"  # a grant in an everyone section
TENANT_DEFAULT = "any"  # a grant in one tenant's section


class GrantError(ValueError):
    """A grant the policy file cannot hold; the message names its key."""


@dataclass(frozen=True)
class Grant:
    pattern: str  # skill-name fnmatch pattern
    values: tuple[str, ...]  # secret names or URL patterns
    owner: str = EVERYONE_DEFAULT  # whose skills it reaches: one of OWNERS

    def reaches(self, skill: str, skill_owner: str | None) -> bool:
        """Whether this grant gives its values to a run of `skill`, whose creator is
        `skill_owner` (None: the operator's own folders)."""
        if self.owner != "any" and (self.owner == "operator") != (skill_owner is None):
            return False
        return fnmatch.fnmatchcase(skill, self.pattern)


Grants = tuple[Grant, ...]


def granted(grants: Iterable[Grant], skill: str, skill_owner: str | None) -> list[str]:
    """The values of every grant that reaches `skill`, in the file's order, once each."""
    found: dict[str, None] = {}
    for grant in grants:
        if grant.reaches(skill, skill_owner):
            found.update(dict.fromkeys(grant.values))
    return list(found)


def parse_grants(
    table: Any, where: str, *, values_key: str, check: Callable[[Any, str], Sequence[str]], default_owner: str
) -> Grants:
    """A table of `"pattern" = [values]` or `"pattern" = { <values_key> = [values], owner = "..." }`.
    `check(value, where)` validates a list of values (raising GrantError or ValueError)."""
    if not isinstance(table, dict):
        raise GrantError(f"{where} must be a table of \"skill pattern\" = [...]")
    found = []
    for pattern, value in table.items():
        key = f"{where}.{pattern!r}"
        owner = default_owner
        if isinstance(value, dict):
            if unknown := sorted(set(value) - {values_key, "owner"}):
                raise GrantError(f"{key} has unknown keys {unknown} (known: {values_key}, owner)")
            owner = value.get("owner", default_owner)
            if owner not in OWNERS:
                raise GrantError(f"{key}.owner must be one of {', '.join(map(repr, OWNERS))}, not {owner!r}")
            if values_key not in value:
                raise GrantError(f"{key} needs {values_key} = [...]")
            value = value[values_key]
        found.append(Grant(str(pattern), tuple(check(value, key)), owner))
    return tuple(found)
