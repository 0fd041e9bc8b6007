"""The doors' shared layer (wasmrun/doors/): keys read in each door's forms and resolved
against a real tenant store, the 429 admission, the path check each door words its own way,
and the rule that the layer imports no door (pure: no server)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from starlette.requests import Request

from tests.liveserver import REPO
from wasmrun.azure import identifiers
from wasmrun.doors import paths
from wasmrun.doors.admission import Busy, admit
from wasmrun.doors.callers import KeyForm, Unauthenticated, resolve
from wasmrun.e2b import calls
from wasmrun.e2b import paths as e2b_paths
from wasmrun.e2b.calls import FrontError
from wasmrun.jupyter import front as jupyter_front
from wasmrun.tenants.calls import RequestsInFlight
from wasmrun.tenants.limits import TenantLimits
from wasmrun.tenants.store import TenantDirectory, TenantStore

DOORS = ("wasmrun.e2b", "wasmrun.jupyter", "wasmrun.azure")


def _request(headers: dict[str, str] | None = None, query: str = "") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "GET", "path": "/", "headers": raw, "query_string": query.encode()})


def test_the_doors_layer_imports_no_door() -> None:
    root = REPO / "wasmrun" / "doors"
    modules = sorted(root.glob("*.py"))
    assert {m.name for m in modules} >= {"callers.py", "admission.py", "paths.py", "cells.py"}
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(DOORS), f"{module.name} imports the door {name}"


def test_each_door_reads_the_key_where_its_clients_send_it(tmp_path: Path) -> None:
    keys = TenantStore(tmp_path)
    alice, bob = keys.add("alice"), keys.add("bob")
    store = TenantDirectory(keys, TenantLimits(), anonymous=None)
    e2b, jupyter, azure = calls.KEY_FORMS, jupyter_front.KEY_FORMS, (KeyForm.AUTHORIZATION,)

    def tenant(forms: tuple[KeyForm, ...], headers: dict[str, str] | None = None, query: str = "") -> str | None:
        found = resolve(store.authenticate, _request(headers, query), forms)
        return None if isinstance(found, Unauthenticated) else found.tenant

    # E2B: X-API-KEY first, else a Bearer header; a Jupyter token is not E2B's.
    assert tenant(e2b, {"X-API-KEY": alice, "Authorization": f"Bearer {bob}"}) == "alice"
    assert tenant(e2b, {"Authorization": f"Bearer {bob}"}) == "bob"
    assert tenant(e2b, {}, f"token={alice}") is None
    # Jupyter: `token` or `Bearer` in the header, else ?token=; the header decides when present.
    assert tenant(jupyter, {"Authorization": f"token {alice}"}) == "alice"
    assert tenant(jupyter, {"Authorization": f"Bearer {bob}"}, f"token={alice}") == "bob"
    assert tenant(jupyter, {}, f"token={alice}") == "alice"
    assert tenant(jupyter, {"Authorization": "token "}, f"token={alice}") is None
    assert tenant(jupyter, {"X-API-KEY": alice}) is None
    # Azure: the Authorization header only.
    assert tenant(azure, {"Authorization": f"Bearer {alice}"}) == "alice"
    assert tenant(azure, {"X-API-KEY": alice}) is None and tenant(azure, {}, f"token={alice}") is None
    # The outcome says whether a key was sent at all.
    assert resolve(store.authenticate, _request({}), azure) == Unauthenticated(presented=False)
    assert resolve(store.authenticate, _request({"Authorization": "Bearer nope"}), azure) == Unauthenticated(presented=True)


def test_admission_is_a_place_held_until_closed_then_a_429(tmp_path: Path) -> None:
    keys = TenantStore(tmp_path)
    key = keys.add("carol", {"concurrent_requests": 1})
    caller = TenantDirectory(keys, TenantLimits(), anonymous=None).authenticate(f"Bearer {key}")
    assert caller is not None
    in_flight = RequestsInFlight()
    held = admit(in_flight, caller)
    assert not isinstance(held, Busy)
    refused = admit(in_flight, caller)
    assert isinstance(refused, Busy) and refused.status == 429 and "concurrent_requests" in refused.message
    held.close()
    again = admit(in_flight, caller)
    assert not isinstance(again, Busy)
    again.close()


def test_one_path_check_each_door_words_its_own_way() -> None:
    check = paths.relative
    assert check("~/a/./b", ("/home/user",), max_chars=100, max_parts=4, home="/home/user") == "a/b"
    assert check("/mnt/data", ("/mnt/data",), max_chars=100, max_parts=4) == ""
    assert check("~/x", ("/mnt/data",), max_chars=100, max_parts=4) == "~/x"  # no home: a folder named ~
    for bad, why in (("", paths.Refusal.MALFORMED), ("a\x00", paths.Refusal.MALFORMED), ("x" * 101, paths.Refusal.MALFORMED),
                     ("/etc/passwd", paths.Refusal.OUTSIDE), ("\\windows", paths.Refusal.OUTSIDE),
                     ("a/../../b", paths.Refusal.LEADS_OUT), ("a/b/c/d/e", paths.Refusal.TOO_DEEP)):
        with pytest.raises(paths.PathRefused) as refused:
            check(bad, ("/mnt/data",), max_chars=100, max_parts=4)
        assert refused.value.why is why, bad
    # Each door: a 400 in its own words, naming its folder.
    with pytest.raises(FrontError) as e2b:
        e2b_paths.relative("/etc/passwd")
    with pytest.raises(FrontError) as azure:
        identifiers.relative("/etc/passwd")
    assert e2b.value.status == azure.value.status == 400
    assert "/home/user" in e2b.value.message and "/mnt/data" in azure.value.message
    assert e2b_paths.relative("/workspace/a") == "a" and identifiers.relative("/mnt/data/a") == "a"
