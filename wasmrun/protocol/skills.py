"""list_skills, describe_skill, read_skill_file, load_skills_protocol_guide, create_skill."""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Callable, Collection, Iterator
from typing import Any, TypeVar

import msgspec

from wasmrun.capabilities import ServerFacts, facts_of
from wasmrun.offload import for_run
from wasmrun.protocol import packages
from wasmrun.protocol.context import Context
from wasmrun.protocol.errors import (
    ContentTooLarge,
    InternalError,
    InvalidParams,
    InvalidSkill,
    QuotaExceeded,
    RPCError,
    ServerBusy,
    SkillExists,
    SkillNotFound,
    UnsafePath,
)
from wasmrun.protocol.types import (
    CreateSkillParams,
    CreateSkillResult,
    DescribeSkillParams,
    DescribeSkillResult,
    ListSkillsParams,
    ListSkillsResult,
    LoadGuideParams,
    LoadGuideResult,
    ReadSkillFileParams,
    ReadSkillFileResult,
    SkillDescription,
    SkillEntry,
)
from wasmrun.registry import skillmd
from wasmrun.registry.errors import (
    InvalidSkillFiles,
    Part,
    RegistryError,
    SkillAlreadyExists,
    SkillDamaged,
    SkillFileTooLarge,
    SkillUnavailable,
    UnsafeSkillPath,
)
from wasmrun.registry.interface import NewFile, ReservedName, SkillQuota, SkillQuotaExceeded
from wasmrun.registry.skill import DOC_FILE, ListingPosition, Skill, SkillSummary

T = TypeVar("T")

GUIDE_SKILL = "skills.protocol.guide"
MAX_LIST_LIMIT = 200


_RPC_ERRORS: dict[type[RegistryError], type[InvalidParams]] = {
    SkillAlreadyExists: SkillExists,
    InvalidSkillFiles: InvalidSkill,
    UnsafeSkillPath: UnsafePath,
    SkillFileTooLarge: ContentTooLarge,
}


# The member of a call's params each input of a registry call comes from
# (create_skill's manifest and skill_md, read_skill_file's path).
_FIELDS: dict[Part, str] = {Part.MANIFEST: "manifest", Part.SKILL_MD: "skill_md", Part.PATH: "path"}


def field_of(exc: RegistryError) -> str | None:
    """The params field path of the input the registry refused (`files[2].path`)."""
    if exc.part is Part.FILE and exc.file_index is not None:
        return f"files[{exc.file_index}].path"
    return _FIELDS.get(exc.part) if exc.part is not None else None


def rpc_error(exc: RegistryError) -> RPCError:
    """The JSON-RPC error a client sees for what the registry refused."""
    if isinstance(exc, SkillUnavailable):  # out of reach for now: worth trying again
        return ServerBusy(f"server busy: {exc.message}")
    if isinstance(exc, SkillDamaged):  # the server's storage failed, not the request
        return InternalError(exc.message)
    extra = {"problems": exc.problems} if exc.problems is not None else {}
    return _RPC_ERRORS.get(type(exc), InvalidParams)(exc.message, field=field_of(exc), **extra)


@contextlib.contextmanager
def registry_errors() -> Iterator[None]:
    try:
        yield
    except RegistryError as exc:
        raise rpc_error(exc) from None


async def find_skill(
    ctx: Context, name: str, version: str | None, field: str = "name", version_field: str = "version",
    *, for_runs: bool = False,
) -> Skill:
    """A skill the caller may see: the operator's, or one its own tenant created.
    Another tenant's skill is "not found", exactly like a name never created.
    A lookup that may wait for the database or the object store (a created skill's
    row, its bundle fetched and unpacked) runs in a thread: the event loop serves
    other calls meanwhile. The skill found is added to `ctx.resolved`, for the call's record."""
    owner = ctx.caller.tenant
    in_memory = ctx.registry.finds_in_memory(name, owner)

    async def ask(lookup: Callable[..., T], *args: Any) -> T:
        if in_memory:
            return lookup(*args)
        # A run's lookup on the run bookkeeping pool (wasmrun/offload.py), others on the default one.
        return await (for_run(lookup, *args) if for_runs else asyncio.to_thread(lookup, *args))

    with registry_errors():
        skill = await ask(ctx.registry.find, name, version, owner)
        if skill is not None:
            if ctx.resolved is not None:
                ctx.resolved.append(skill)
            return skill
        known: list[str] = await ask(ctx.registry.versions, name, owner) if version is not None else []
    if known:
        raise SkillNotFound(
            f"skill {name!r} has no version {version!r} (available: {', '.join(known)})", field=version_field
        )
    raise SkillNotFound(f"no skill named {name!r}", field=field)


# -- list_skills --------------------------------------------------------------

def _encode_cursor(skill: SkillSummary) -> str:
    key = [skill.manifest.effective_namespace, skill.name, skill.version]
    return base64.urlsafe_b64encode(msgspec.json.encode(key)).decode().rstrip("=")


def _decode_cursor(cursor: str) -> ListingPosition:
    try:
        data = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        # Typed: anything but three strings stops at its first byte, however deep it nests.
        ns, name, version = msgspec.json.decode(data, type=tuple[str, str, str])
        return ListingPosition.parse(ns, name, version)
    except (ValueError, msgspec.DecodeError):  # binascii.Error and a bad position are ValueErrors
        raise InvalidParams("cursor is not one this server gave out", field="cursor") from None


def _entry(skill: SkillSummary, detail: str) -> SkillEntry:
    m = skill.manifest
    entry = SkillEntry(
        name=m.name,
        version=m.version,
        description=m.description,
        namespace=m.effective_namespace,
        kind=m.kind,
    )
    if detail == "summary":
        entry.tags = list(m.tags)
        fm = skill.frontmatter
        if isinstance(fm.get("name"), str):
            entry.title = fm["name"]
        if isinstance(fm.get("short_description"), str):
            entry.short_description = fm["short_description"]
    return entry


async def list_skills(ctx: Context, p: ListSkillsParams) -> ListSkillsResult:
    after = _decode_cursor(p.cursor) if p.cursor else None
    with registry_errors():
        page = await asyncio.to_thread(
            ctx.registry.page, ctx.caller.tenant, namespace=p.namespace or None, after=after,
            limit=min(p.limit, MAX_LIST_LIMIT),
        )
    return ListSkillsResult(
        skills=[_entry(s, p.detail) for s in page.skills],
        next_cursor=_encode_cursor(page.skills[-1]) if page.more and page.skills else None,
    )


# -- describe_skill, read_skill_file ------------------------------------------

async def describe_skill(ctx: Context, p: DescribeSkillParams) -> DescribeSkillResult:
    skill = await find_skill(ctx, p.name, p.version)
    description = SkillDescription(manifest=skill.raw_manifest)
    if p.detail in ("summary", "full"):
        description.skill_md_frontmatter = skill.frontmatter
    if p.detail == "full":
        with registry_errors():
            data = await asyncio.to_thread(ctx.registry.read_file, skill, DOC_FILE, ctx.max_full_read_bytes)
            description.files = await asyncio.to_thread(ctx.registry.list_files, skill)
        description.skill_md = data.decode("utf-8", "replace")
    return DescribeSkillResult(skill=description)


async def read_skill_file(ctx: Context, p: ReadSkillFileParams) -> ReadSkillFileResult:
    skill = await find_skill(ctx, p.name, p.version)
    with registry_errors():
        data = await asyncio.to_thread(ctx.registry.read_file, skill, p.path, ctx.max_full_read_bytes)
    try:
        return ReadSkillFileResult(content=data.decode("utf-8"), encoding="utf-8", size_bytes=len(data))
    except UnicodeDecodeError:
        return ReadSkillFileResult(
            content=base64.b64encode(data).decode("ascii"), encoding="base64", size_bytes=len(data)
        )


async def load_skills_protocol_guide(ctx: Context, p: LoadGuideParams, methods: Collection[str]) -> LoadGuideResult:
    """The guide, with this server's facts and `methods` (the names of the table serving it,
    methods.py, which hands them here: this module does not import its own dispatcher)."""
    # Always the guide shipped with wasmrun: what every agent reads first is not
    # for a client (or even another skills folder) to replace.
    bundled = [s for s in ctx.registry.skills() if s.name == GUIDE_SKILL and s.bundled]
    skill = max(bundled, key=lambda s: s.semver) if bundled else None
    if skill is None:
        raise InternalError(f"the canonical {GUIDE_SKILL} skill is not installed on this server")
    with registry_errors():
        data = await asyncio.to_thread(ctx.registry.read_file, skill, DOC_FILE, ctx.max_full_read_bytes)
    section = _server_facts(ctx).guide_section(tuple(methods))
    body = skillmd.body(data.decode("utf-8")).rstrip() + "\n\n" + section + "\n"
    return LoadGuideResult(content=body, name=skill.name, version=skill.version)


def _server_facts(ctx: Context) -> ServerFacts:
    return facts_of(ctx.limits, ctx.egress.network.run_code, ctx.served.facts())


# -- create_skill -------------------------------------------------------------

async def create_skill(ctx: Context, p: CreateSkillParams) -> CreateSkillResult:
    files = []
    for i, f in enumerate(p.files):
        if f.encoding == "base64":
            try:
                content = base64.b64decode(f.content, validate=True)
            except ValueError:  # binascii.Error, or a character outside ASCII
                raise InvalidParams(
                    f"files[{i}].content is not valid base64", field=f"files[{i}].content"
                ) from None
        else:
            content = f.content.encode("utf-8")
        files.append(NewFile(path=f.path, content=content))
    caller = ctx.caller
    quota = SkillQuota(caller.limits.skills, caller.limits.skill_bytes)
    installer = packages.skill_installer(ctx)
    try:
        skill = await asyncio.to_thread(
            ctx.registry.create, p.manifest, p.skill_md, files, caller.tenant, quota, installer,
        )
    except packages.REFUSALS as exc:  # the packages it declares cannot be installed: nothing was stored
        raise packages.refusal(ctx, exc, "manifest.packages.requires") from None
    except ReservedName as exc:
        raise InvalidSkill(str(exc), field="manifest.name") from None
    except SkillQuotaExceeded as exc:
        raise QuotaExceeded(f"quota exceeded: {exc.message}", exc.limit, exc.value) from None
    except RegistryError as exc:  # SkillUnavailable: its bundle could not be stored, nothing was created
        raise rpc_error(exc) from None
    result = CreateSkillResult(name=skill.name, version=skill.version)
    if installer is not None and installer.installed is not None:
        result.packages_installed = packages.answer(installer.installed)
    return result
