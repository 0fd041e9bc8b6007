"""Shared fixtures for the protocol-server tests: one real sandbox executor for
the session, and per test a fresh data dir, an extra skills folder and an app."""

from __future__ import annotations

import functools
import itertools
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from tests import images
from wasmrun.blobs.store import FileBlobStore
from wasmrun.egress.grants import Grant
from wasmrun.protocol.context import Context
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import Server, assemble, create_app
from wasmrun.settings import BUNDLED_SKILLS, Settings
from wasmrun.tenants.policy import AccessPolicy


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "images(*names): the guest images a test runs on (tests/images.py; default stdlib)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test runs once per image it is marked for: `test_image` is its parameter."""
    if "test_image" in metafunc.fixturenames:
        metafunc.parametrize("test_image", images.images_of(metafunc.definition), indirect=True, scope="session")


# The longest files (junit times of a full `make test`, 2026-12-03: 170-600 s each), first: a
# worker of `pytest -n --dist loadfile --no-loadscope-reorder` takes files in this order (xdist's
# own reorder puts the files with the most tests first), and a long one taken last would leave
# the other workers idle at the end.
LONGEST_FIRST = (
    "test_onefile.py", "test_shared_sessions.py", "test_hostile_tenancy.py", "test_bench_command.py",
    "test_cpython_regrtest.py", "test_image_roll.py", "test_packages_common.py", "test_data_warmup.py",
    "test_sessions.py", "test_clean_clone.py", "test_shared_availability.py", "test_shared_registry.py",
    "test_shared_quotas.py", "test_shared_blobs.py", "test_hostile_sandbox.py", "test_e2b_bounds.py",
)


@pytest.hookimpl(trylast=True)  # after pytest has ordered the items by the image parameter
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (stable: each file's [stdlib] tests before its [data] tests);
    WASMRUN_TEST_IMAGE=<image>: only that image's tests (the others are deselected)."""
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
    keep = images.wanted()
    if keep == images.IMAGES:
        return
    chosen = [item for item in items if getattr(item, "callspec", None) is None
              or item.callspec.params.get("test_image", keep[0]) in keep]  # type: ignore[attr-defined]
    if len(chosen) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in chosen])
        items[:] = chosen


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """What a run cost, for the CI budget (issue 41): the tests run per image and per folder
    of tests/, and the files that took longest (setup, call and teardown summed: a module's
    server start counts for its file)."""
    per_file: dict[str, float] = {}
    per_image: dict[str, int] = {}
    per_folder: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            when = getattr(report, "when", None)
            if not nodeid.startswith("tests/") or when is None:
                continue
            path = nodeid.partition("::")[0]
            per_file[path] = per_file.get(path, 0.0) + float(getattr(report, "duration", 0.0))
            if when != "call" and not (when == "setup" and report.outcome == "skipped"):
                continue
            image = next((name for name in images.IMAGES if nodeid.endswith(f"{name}]") or f"[{name}-" in nodeid
                          or f"-{name}]" in nodeid or f"-{name}-" in nodeid), "stdlib")
            per_image[image] = per_image.get(image, 0) + 1
            folder = path.rpartition("/")[0]
            per_folder[folder] = per_folder.get(folder, 0) + 1
    if not per_file:
        return
    write = terminalreporter.write_line
    write("tests run per image: " + ", ".join(f"{k} {v}" for k, v in sorted(per_image.items())))
    write("tests run per folder: " + ", ".join(f"{k} {v}" for k, v in sorted(per_folder.items())))
    slowest = sorted(per_file.items(), key=lambda kv: -kv[1])[:25]
    write(f"time per file, longest {len(slowest)} of {len(per_file)} (s, setup+call+teardown): "
          + ", ".join(f"{path.removeprefix('tests/')} {seconds:.0f}" for path, seconds in slowest))


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Any:
    """A module's (or class's) fixture is made again when the image changes: it is torn down
    with the image's parameter, as if it asked for `test_image`. Most start a server on
    `images.current()` without asking for the parameter, and a module's [stdlib] tests can be
    followed at once by its [data] tests (a worker of `pytest -n` runs a file's together,
    `-k` picks a few): without this, the [data] tests would reuse the stdlib server."""
    if fixturedef.scope in ("module", "class", "package") and "test_image" not in fixturedef.argnames:
        request.getfixturevalue("test_image")
        image = request._get_active_fixturedef("test_image")  # type: ignore[attr-defined]
        image.addfinalizer(functools.partial(fixturedef.finish, request=request))
    return (yield)


@pytest.fixture(scope="session", autouse=True)
def test_image(request: pytest.FixtureRequest) -> str:
    """The guest image of this test (`[stdlib]`/`[data]` in its id): the executor's, the
    settings' and every live server's (tests/images.py)."""
    image: str = request.param
    images.set_current(image)
    return image


@pytest.fixture(scope="session")
def blob_store(tmp_path_factory: pytest.TempPathFactory) -> FileBlobStore:
    return FileBlobStore(tmp_path_factory.mktemp("blobs"))


@pytest.fixture(scope="session")
def executor(
    test_image: str, blob_store: FileBlobStore, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[InProcessExecutor]:
    ex = InProcessExecutor(  # one per image: made again when the tests move to the other image
        blob_store, slots=2, queue_timeout=5.0, workspace_root=tmp_path_factory.mktemp("ws"), image=test_image,
    )
    yield ex
    ex.close()


@pytest.fixture()
def skills_dir(tmp_path: Path) -> Path:
    """A read-only skills folder loaded next to the bundled one. To fill it before the
    app loads it, override this fixture in the test module (see skillfiles.write_skill)."""
    path = tmp_path / "extra-skills"
    path.mkdir()
    return path


@pytest.fixture()
def settings(test_image: str, tmp_path: Path, skills_dir: Path) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        skills_dirs=(BUNDLED_SKILLS, skills_dir),
        workers=2,
        image=test_image,  # the executor's: its package layer too
        secrets={"DEMO_TOKEN": "s3cret", "OTHER_TOKEN": "not-for-you"},
        # The operator grants DEMO_TOKEN (and one never configured) to the demo.* skills only.
        access=AccessPolicy(secret_grants=(Grant("demo.*", ("DEMO_TOKEN", "MISSING_ONE")),)),
    )


@pytest.fixture()
def server(settings: Settings, blob_store: FileBlobStore, executor: InProcessExecutor) -> Server:
    """The server `settings` describe, on the session's blob store and executor."""
    return assemble(settings, blobs=blob_store, executor=executor)


@pytest.fixture()
def context(server: Server) -> Context:
    return server.context


@pytest.fixture()
def client(server: Server) -> Iterator[TestClient]:
    with TestClient(create_app(server), base_url="http://localhost") as c:
        yield c


_ids = itertools.count(1)


@pytest.fixture()
def rpc(client: TestClient) -> Callable[..., dict[str, Any]]:
    """rpc(method, params) -> the whole JSON-RPC response object."""

    def call(method: str, params: Any = None) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(_ids), "method": method}
        if params is not None:
            body["params"] = params
        response = client.post("/rpc", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    return call


# -- headless Chromium (Debian's, installed by .ci/chromium; never `playwright install`) ---------

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists() or shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (.ci/chromium installs it)")
    playwright_api = pytest.importorskip("playwright.sync_api")
    with playwright_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield launched
        launched.close()
