"""The operator's policy for packages asked for at run time (on-demand installs,
ondemand.py): whether they are allowed, which, and how much they may take.

    mode          "pure-python" (default): any package of the configured index with a pure
                  wheel; "allowlist": only names matching `allow`; "off": none
    allow         names or glob patterns of names ("humanize", "types-*"), compared with
                  canonical names (PEP 503: lower case, runs of -_. as one -)
    max_set_bytes        the wheels of one resolved set, downloaded (64 MiB)
    max_sets_per_tenant  distinct sets one tenant may have built (32); a set already
                         built for anyone costs nothing again
    max_tenant_bytes     all the wheels a tenant's new sets downloaded (512 MiB)
    download_timeout_s   pip's resolution and download of one set (60 s)
    max_packages         distributions in one set, dependencies included (64)

From the policy file's `[packages]` table, over which WASMRUN_PACKAGES /
`serve --packages` (the mode) and WASMRUN_PACKAGES_ALLOW / `--packages-allow`
(comma-separated) win. The index is pip's own configuration (`pip config list`).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from wasmrun.packages.names import canonical

MODES = ("off", "allowlist", "pure-python")
PATTERN = re.compile(r"[A-Za-z0-9._*?\[\]-]{1,200}", re.ASCII)


@dataclass(frozen=True)
class PackagePolicy:
    mode: str = "pure-python"
    allow: tuple[str, ...] = ()
    max_set_bytes: int = 64 * 1024 * 1024
    max_sets_per_tenant: int = 32
    max_tenant_bytes: int = 512 * 1024 * 1024
    download_timeout_s: float = 60.0
    max_packages: int = 64

    def allows(self, name: str) -> bool:
        """Whether a package named `name` may be installed on demand (the mode and the list)."""
        if self.mode == "off":
            return False
        if self.mode == "allowlist":
            wanted = canonical(name)
            return any(fnmatch.fnmatchcase(wanted, pattern) for pattern in self.allow)
        return True


def _pattern(text: Any, where: str) -> str:
    if not isinstance(text, str) or not PATTERN.fullmatch(text):
        raise ValueError(f"{where}: {str(text)[:60]!r} is not a package name or glob pattern")
    # canonical form, keeping the glob characters
    return re.sub(r"[-_.]+", "-", text).lower()


def load_package_policy(
    table: Any, env: Mapping[str, str], *, mode: str | None = None, allow: str | None = None,
    where: str = "[packages]",
) -> PackagePolicy:
    """The policy from the policy file's `table` (None: none), then the variables, then the flags."""
    policy = PackagePolicy()
    if table is not None:
        if not isinstance(table, dict):
            raise ValueError(f"{where} must be a table")
        known = {f.name for f in fields(PackagePolicy)}
        if unknown := sorted(set(table) - known):
            raise ValueError(f"{where}: unknown keys {unknown} (known: {sorted(known)})")
        values: dict[str, Any] = {}
        for key, value in table.items():
            if key == "mode":
                values[key] = value
            elif key == "allow":
                if not isinstance(value, list) or len(value) > 10_000:
                    raise ValueError(f"{where}: allow must be a list of names or patterns")
                values[key] = tuple(_pattern(v, f"{where}: allow") for v in value)
            elif key == "download_timeout_s":
                if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 3600:
                    raise ValueError(f"{where}: download_timeout_s must be a number of seconds from 0 to 3600")
                values[key] = float(value)
            else:
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"{where}: {key} must be a whole number, 0 or more")
                values[key] = value
        policy = replace(policy, **values)
    mode = mode or env.get("WASMRUN_PACKAGES") or None
    if mode is not None:
        policy = replace(policy, mode=mode)
    allow = allow if allow is not None else env.get("WASMRUN_PACKAGES_ALLOW")
    if allow:
        names = tuple(_pattern(p.strip(), "--packages-allow") for p in allow.split(",") if p.strip())
        policy = replace(policy, allow=names)
    if policy.mode not in MODES:
        raise ValueError(f"packages mode {str(policy.mode)[:40]!r}: one of {', '.join(MODES)}")
    if policy.mode == "allowlist" and not policy.allow:
        raise ValueError("packages mode allowlist needs names or patterns (allow = [...], --packages-allow)")
    return policy
