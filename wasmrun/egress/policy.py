"""The operator's network policy and each run's effective grant.

Who grants what:
- a skill's manifest *requests* network access (`permissions.network`);
- the operator *grants* it, per skill name pattern, in the policy file's
  `[network]` section; a grant reaches the operator's skills only, unless it
  names a tenant or says `owner` (wasmrun/egress/grants.py: grants follow
  ownership, so a tenant's created `salesforce.evil` gets nothing from
  `"salesforce.*"`);
- a run may reach a URL only if it matches both (the intersection).
`run_code` has no manifest: it gets the operator's `run_code` allowlist, empty
(no network) unless the operator writes one. Code that imports a mounted
skill runs with its caller's grant, never the skill's.

    [network]
    allow_private_addresses = false   # loopback/private/link-local: tests, internal deployments
    max_requests = 50                 # per run, redirect hops included
    max_request_bytes = 1048576
    max_response_bytes = 10485760
    max_redirects = 5
    ca_file = "/path/extra-ca.pem"    # trust this CA too (e.g. a test server's)
    run_code = []                     # URL patterns run_code may reach

    [network.skills]                  # the operator's skills
    "salesforce.*" = ["https://*.salesforce.com"]
    "hooks.*" = { urls = ["https://hooks.example"], owner = "any" }   # tenants' created hooks.* too

    [tenants.alice.network.skills]    # only tenant alice's runs (added to the above; her created skills too)
    "crm.*" = ["https://crm.alice.example"]
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from wasmrun.egress.grants import EVERYONE_DEFAULT, TENANT_DEFAULT, GrantError, Grants, granted, parse_grants
from wasmrun.egress.patterns import PatternError, Target, UrlPattern

MiB = 1 << 20


class PolicyError(ValueError):
    """The operator's policy file is not valid; the message names the key."""


class NetworkGrant(msgspec.Struct, frozen=True, kw_only=True):
    """What one run may reach, carried from the protocol layer to the sandbox."""

    subject: str  # "skill salesforce.leads.sync" or "run_code", for messages
    requested: list[str] | None  # the manifest's patterns; None: no manifest (run_code)
    granted: list[str]  # the operator's patterns for this subject
    allow_private: bool = False
    max_requests: int = 50
    max_request_bytes: int = 1 * MiB
    max_response_bytes: int = 10 * MiB
    max_redirects: int = 5
    ca_file: str | None = None
    # Secrets the host keeps and substitutes for their placeholders (`host` mode).
    host_secrets: dict[str, str] = msgspec.field(default_factory=dict)
    # Those of them the operator lets into request bodies too ([secrets] in_bodies):
    # a body is data a server may store and show again, so it is opt-in per secret.
    body_secrets: list[str] = msgspec.field(default_factory=list)

    def refusal(self, target: Target) -> str | None:
        """Why `target` may not be requested, or None if it may."""
        where = target.host_header
        if target.ambiguity is not None and _path_grant_for(
            (*(self.requested or ()), *self.granted), target
        ):
            return (f"{where}{target.path[:200]}: {target.ambiguity}, which a path-prefix grant"
                    " cannot judge (an upstream may read it otherwise); write the path plainly")
        if self.requested is not None and not _any_match(tuple(self.requested), target):
            return f"{where} is not in this skill's permissions.network"
        if not _any_match(tuple(self.granted), target):
            if self.requested is None:
                if not self.granted:
                    return f"{where}: run_code has no network access (the operator has not enabled it)"
                return f"{where} is not in the operator's network allowlist for run_code"
            return f"{where} is not allowed for {self.subject} by the server's network policy"
        return None


@functools.lru_cache(maxsize=256)
def _patterns(texts: tuple[str, ...]) -> tuple[UrlPattern, ...]:
    found = []
    for text in texts:
        try:
            found.append(UrlPattern.parse(text))
        except PatternError:
            continue  # a manifest pattern that does not parse grants nothing
    return tuple(found)


def _any_match(texts: tuple[str, ...], target: Target) -> bool:
    return any(p.matches(target) for p in _patterns(texts))


def _path_grant_for(texts: tuple[str, ...], target: Target) -> bool:
    """Whether a pattern with a path prefix names `target`'s origin (so its path matters)."""
    return any(p.path and p.matches_origin(target) for p in _patterns(texts))


@dataclass(frozen=True)
class NetworkPolicy:
    """The `[network]` section of the operator's policy file."""

    skills: Grants = ()  # skill-name pattern -> URL patterns, for whose skills
    # One tenant's grants, added to everyone's: [tenants.<name>.network.skills].
    tenant_skills: Mapping[str, Grants] = field(default_factory=dict)
    run_code: tuple[str, ...] = ()
    allow_private_addresses: bool = False
    max_requests: int = 50
    max_request_bytes: int = 1 * MiB
    max_response_bytes: int = 10 * MiB
    max_redirects: int = 5
    ca_file: str | None = None

    def granted_for_skill(self, name: str, tenant: str | None = None, owner: str | None = None) -> list[str]:
        """The URL patterns granted to `tenant`'s runs of skill `name`, created by `owner`
        (None: the operator's skill)."""
        extra = self.tenant_skills.get(tenant, ()) if tenant is not None else ()
        return granted((*self.skills, *extra), name, owner)

    def _grant(self, subject: str, requested: list[str] | None, granted: list[str],
               host_secrets: Mapping[str, str], body_secrets: Collection[str] = ()) -> NetworkGrant:
        # Even an empty grant is carried: a refusal then says which side said no.
        return NetworkGrant(
            subject=subject,
            requested=requested,
            granted=granted,
            allow_private=self.allow_private_addresses,
            max_requests=self.max_requests,
            max_request_bytes=self.max_request_bytes,
            max_response_bytes=self.max_response_bytes,
            max_redirects=self.max_redirects,
            ca_file=self.ca_file,
            host_secrets=dict(host_secrets),
            body_secrets=sorted(n for n in body_secrets if n in host_secrets),
        )

    def for_skill(
        self, name: str, requested: list[str], host_secrets: Mapping[str, str], tenant: str | None = None,
        body_secrets: Collection[str] = (), *, owner: str | None,
    ) -> NetworkGrant:
        """The grant of an execute_skill run: the manifest's request ∩ the operator's
        grant (everyone's, plus the calling tenant's own) that reaches the skill's owner."""
        return self._grant(
            f"skill {name}", list(requested), self.granted_for_skill(name, tenant, owner), host_secrets,
            body_secrets,
        )

    def for_run_code(self) -> NetworkGrant:
        """run_code: only what the operator enabled for it, never a mounted skill's grant."""
        return self._grant("run_code", None, list(self.run_code), {})


_LIMIT_KEYS = ("max_requests", "max_request_bytes", "max_response_bytes", "max_redirects")
_KNOWN = {"skills", "run_code", "allow_private_addresses", "ca_file", *_LIMIT_KEYS}


def _url_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PolicyError(f"{where} must be a list of URL patterns")
    for text in value:
        try:
            UrlPattern.parse(text)
        except PatternError as exc:
            raise PolicyError(f"{where}: {exc}") from None
    return tuple(value)


def _skill_grants(table: Any, where: str, default_owner: str = EVERYONE_DEFAULT) -> Grants:
    if not isinstance(table, dict):
        raise PolicyError(f"[{where}] must be a table of skill-name pattern = [URL patterns]")
    try:
        return parse_grants(table, where, values_key="urls", check=_url_list, default_owner=default_owner)
    except GrantError as exc:
        raise PolicyError(str(exc)) from None


def _tenant_grants(tenants: Any) -> dict[str, Grants]:
    """`[tenants.<name>.network.skills]`: only the network part of each tenant's table."""
    if not isinstance(tenants, dict):
        return {}  # the access policy reports a malformed [tenants]
    found = {}
    for tenant, table in tenants.items():
        network = table.get("network") if isinstance(table, dict) else None
        if network is None:
            continue
        if not isinstance(network, dict) or set(network) - {"skills"}:
            raise PolicyError(f"[tenants.{tenant}.network] may only hold a [skills] table")
        found[str(tenant)] = _skill_grants(
            network.get("skills", {}), f"tenants.{tenant}.network.skills", TENANT_DEFAULT
        )
    return found


def parse_network_policy(section: Any) -> NetworkPolicy:
    """The `[network]` table of the policy file (absent: no network for anyone)."""
    if section is None:
        return NetworkPolicy()
    if not isinstance(section, dict):
        raise PolicyError("[network] must be a table")
    unknown = sorted(set(section) - _KNOWN)
    if unknown:
        raise PolicyError(f"[network] has unknown keys: {', '.join(unknown)}")
    values: dict[str, Any] = {
        "skills": _skill_grants(section.get("skills", {}), "network.skills"),
        "run_code": _url_list(section.get("run_code", []), "network.run_code"),
    }
    allow = section.get("allow_private_addresses", False)
    if not isinstance(allow, bool):
        raise PolicyError("network.allow_private_addresses must be true or false")
    values["allow_private_addresses"] = allow
    for key in _LIMIT_KEYS:
        if key in section:
            value = section[key]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 40:
                raise PolicyError(f"network.{key} must be a non-negative integer")
            values[key] = value
    ca_file = section.get("ca_file")
    if ca_file is not None and not isinstance(ca_file, str):
        raise PolicyError("network.ca_file must be a path")
    values["ca_file"] = ca_file
    return NetworkPolicy(**values)


@dataclass(frozen=True)
class EgressPolicy:
    """What the policy file decides about egress. `configured` is False when there is no file."""

    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    secret_modes: Mapping[str, str] = field(default_factory=dict)
    default_secret_mode: str = "env"
    configured: bool = False
    body_secrets: frozenset[str] = frozenset()  # host-mode secrets also put into request bodies

    def secret_mode(self, name: str) -> str:
        return self.secret_modes.get(name, self.default_secret_mode)


SECRET_MODES = ("env", "host")


def parse_egress_policy(table: Mapping[str, Any]) -> EgressPolicy:
    """The egress part of a parsed policy file: `[network]` above, and how each
    secret reaches a run:

        [secrets]
        default_mode = "host"             # the default in a policy file
        in_bodies = ["STRIPE_KEY"]        # host-mode secrets also put into request bodies
        [secrets.modes]
        LEGACY_TOKEN = "env"              # this one is put in the run's environment

    `host`: the guest sees only `wasmrun-secret:NAME`; the host puts the value
    into requests to hosts the skill may reach. `env`: the value itself is in
    the run's environment (the spec's behaviour; code can read and leak it).
    Other sections and keys of the file (which skills are granted which
    secrets, tenants, ...) belong to the access policy, which reads them itself.
    """
    network = parse_network_policy(table.get("network"))
    tenant_grants = _tenant_grants(table.get("tenants", {}))
    if tenant_grants:
        network = dataclasses.replace(network, tenant_skills=tenant_grants)
    secrets = table.get("secrets", {})
    if not isinstance(secrets, dict):
        raise PolicyError("[secrets] must be a table")
    default = secrets.get("default_mode", "host")
    if default not in SECRET_MODES:
        raise PolicyError(f"secrets.default_mode must be \"host\" or \"env\", not {default!r}")
    table_of_modes = secrets.get("modes", {})
    if not isinstance(table_of_modes, dict):
        raise PolicyError("[secrets.modes] must be a table of NAME = \"host\" | \"env\"")
    modes: dict[str, str] = {}
    for name, mode in table_of_modes.items():
        if mode not in SECRET_MODES:
            raise PolicyError(f"secrets.modes.{name} must be \"host\" or \"env\", not {mode!r}")
        modes[name] = mode
    in_bodies = secrets.get("in_bodies", [])
    if not isinstance(in_bodies, list) or not all(isinstance(n, str) and n for n in in_bodies):
        raise PolicyError("secrets.in_bodies must be a list of secret names")
    return EgressPolicy(network=network, secret_modes=modes, default_secret_mode=default, configured=True,
                        body_secrets=frozenset(in_bodies))


def load_egress_policy(path: str | None) -> EgressPolicy:
    """The egress part of the policy file at `path`, or the no-file policy:
    no network, secrets in `env` mode."""
    if path is None:
        return EgressPolicy()
    import tomllib

    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"policy file {path} is not valid TOML: {exc}") from None
    try:
        policy = parse_egress_policy(table)
    except PolicyError as exc:
        raise PolicyError(f"policy file {path}: {exc}") from None
    ca_file = policy.network.ca_file
    if ca_file is not None:  # relative to the policy file's folder
        resolved = (Path(path).parent / Path(ca_file).expanduser()).resolve()
        if not resolved.is_file():
            raise PolicyError(f"policy file {path}: network.ca_file {ca_file!r} is not a file")
        policy = dataclasses.replace(policy, network=dataclasses.replace(policy.network, ca_file=str(resolved)))
    return policy
