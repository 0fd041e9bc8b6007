"""A RunRequest turned into what the guest's `_boot.run` reads (wasmrun/abi.py's GuestRequest)."""

from __future__ import annotations

from pathlib import Path

import msgspec

from wasmrun.abi import SKILLS_ROOT, GuestRequest, encode_request
from wasmrun.sandbox.contract.types import RunRequest
from wasmrun.sandbox.files.packagelayer import PackageLayer


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
    return encode_request(GuestRequest(
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
