"""A server without tenants (loopback only, as for every door) serves the Azure door to any
token: every caller is the default tenant, so one identifier is one session whatever the
token, as /rpc and the E2B door answer on such a server."""

from __future__ import annotations

import io
import warnings
from collections.abc import Iterator

import pytest

from tests.liveserver import LiveServer

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from langchain_azure_dynamic_sessions import SessionsPythonREPLTool


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("azure-open") / "data")
    try:
        yield live
    finally:
        live.stop()


def test_any_token_is_the_default_tenant(server: LiveServer) -> None:
    def tool(token: str) -> SessionsPythonREPLTool:
        return SessionsPythonREPLTool(pool_management_endpoint=f"{server.base_url}/azure/pools/local",
                                      access_token_provider=lambda: token, session_id="mine")

    tool("one").execute("kept = 'yes'")
    tool("one").upload_file(data=io.BytesIO(b"12345"), remote_file_path="n.txt")
    again = tool("another")
    assert again.execute("kept")["result"] == "'yes'"
    assert [(f.filename, f.size_in_bytes) for f in again.list_files()] == [("n.txt", 5)]
