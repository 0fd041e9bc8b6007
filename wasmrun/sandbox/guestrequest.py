"""The run as the guest sees it: what the guest's `_boot.run` reads (python_wasm/runtime)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from wasmrun.sandbox.image import SKILLS_ROOT
from wasmrun.sandbox.packagelayer import PackageLayer
from wasmrun.sandbox.types import RunRequest


class GuestRequest(msgspec.Struct):
    """What the guest's `_boot.run` reads: the run, as the guest sees it."""

    kind: str
    code: str | None
    skill: str | None
    function: str
    args: msgspec.Raw  # already JSON text: passed on as it is
    skills: dict[str, str]  # skill name -> its entrypoint's path in the guest
    sys_path: list[str]
    env: dict[str, str]
    session: bool = False  # run in the session's module (its globals persist)
    reseed: bool = True  # reseed `random` (a session's runs after its first keep their state)


_encoder = msgspec.json.Encoder()


def encode(request: RunRequest, packages: Path | None) -> bytes:
    """`request` for the guest; `packages`: the operator's package layer is mounted."""
    skills = {
        s.name: f"{SKILLS_ROOT}/{s.name}/{s.entrypoint}"
        for s in request.skills
        if s.entrypoint
    }
    sys_path = []
    if request.kind == "skill" and request.skill in skills:
        sys_path.append(skills[request.skill].rsplit("/", 1)[0])
    if packages is not None:
        sys_path.append(PackageLayer.GUEST_SITE)
    return _encoder.encode(GuestRequest(
        kind=request.kind,
        code=request.code,
        skill=request.skill,
        function=request.function,
        args=msgspec.Raw(request.args_json),
        skills=skills,
        sys_path=sys_path,
        env=request.env,
        session=request.session is not None,
        reseed=request.session is None or request.session.reseed,
    ))
