"""`import ssl` in the sandbox: the module, its constants and contexts work
(runtime/_tls.py stands in for OpenSSL's `_ssl`); HTTPS with a context goes
through the host, which does the TLS; what needs TLS in the guest itself
fails when called, with an error that says why."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.egress_server import LocalServer, serve
from tests.sandbox.conftest import make_skill
from wasmrun.egress.policy import NetworkGrant
from wasmrun.sandbox.contract.types import MountedSkill, RunRequest
from wasmrun.sandbox.guest.jsontext import encode_args

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

USE = """
import ssl

def main(args):
    ctx = ssl.create_default_context()
    loose = ssl._create_unverified_context()
    ctx.load_verify_locations(cadata=args["pem"])
    ctx.set_alpn_protocols(["http/1.1"])
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        loose.verify_mode = ssl.CERT_NONE
        ctx.verify_mode = ssl.CERT_NONE
        refused = None
    except ValueError as exc:
        refused = str(exc)
    return {
        "context": type(ctx).__name__,
        "required": ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname,
        "loose": loose.verify_mode == ssl.CERT_NONE and not loose.check_hostname,
        "minimum": ctx.minimum_version.name,
        "options": bool(ctx.options & ssl.OP_NO_SSLv3),
        "purpose": ssl.Purpose.SERVER_AUTH.shortname,
        "refused": refused,
        "names": [ssl.PROTOCOL_TLS_CLIENT.name, ssl.CERT_REQUIRED.name, ssl.AlertDescription(40).name],
        "subclass": issubclass(ssl.SSLCertVerificationError, ValueError) and issubclass(ssl.SSLError, OSError),
        "random": len(ssl.RAND_bytes(16)),
    }
"""


def test_ssl_imports_and_makes_contexts(run_code) -> None:
    ca = trustme.CA()
    result = run_code(USE, args={"pem": ca.cert_pem.bytes().decode()})
    assert result.status == "completed", (result.error, result.logs)
    assert result.output == {
        "context": "SSLContext", "required": True, "loose": True, "minimum": "TLSv1_2", "options": True,
        "purpose": "serverAuth",
        "refused": "Cannot set verify_mode to CERT_NONE when check_hostname is enabled.",
        "names": ["PROTOCOL_TLS_CLIENT", "CERT_REQUIRED", "ALERT_DESCRIPTION_HANDSHAKE_FAILURE"],
        "subclass": True, "random": 16,
    }


UNAVAILABLE = """
import socket, ssl, http.client

def main(args):
    ctx = ssl.create_default_context()
    out = {}
    for name, call in {
        "wrap_bio": lambda: ctx.wrap_bio(ssl.MemoryBIO(), ssl.MemoryBIO(), server_hostname="example.com"),
        "cert_chain": lambda: ctx.load_cert_chain("/workspace/cert.pem"),
        "connection": lambda: http.client.HTTPSConnection("example.com", context=ctx).request("GET", "/"),
    }.items():
        try:
            call()
            out[name] = "no error"
        except OSError as exc:
            out[name] = [type(exc).__name__, str(exc)]
    return out
"""


def test_tls_in_the_guest_fails_when_used_saying_why(run_code) -> None:
    result = run_code(UNAVAILABLE)
    assert result.status == "completed", (result.error, result.logs)
    out = result.output
    for name in ("wrap_bio", "cert_chain"):
        assert out[name][0] == "SSLError", out
        assert "cannot be made inside the sandbox" in out[name][1] and "runtime.http" in out[name][1]
    assert out["connection"][0] == "gaierror" and "no sockets" in out["connection"][1]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def secure(ca: trustme.CA) -> Iterator[LocalServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    with serve(context, host_name="localhost") as server:
        yield server


FETCH = """
import json, ssl, urllib.request

def main(args):
    ctx = ssl.create_default_context()
    with urllib.request.urlopen(args["url"], context=ctx, timeout=10) as r:
        first = json.loads(r.read())
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl.create_default_context()))
    with opener.open(args["url"]) as r:
        second = r.status
    return {"first": first, "second": second}
"""


def test_a_context_passed_to_urllib_gets_the_hosts_tls(engine, secure: LocalServer, ca: trustme.CA, tmp_path) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    grant = NetworkGrant(
        subject="run_code", requested=None, granted=[secure.url], allow_private=True, ca_file=str(ca_file)
    )
    url = secure.url + "/json"
    result = engine.run(RunRequest(kind="code", code=FETCH, args_json=encode_args({"url": url}), network=grant))
    assert result.status == "completed", (result.error, result.logs)
    assert result.output["second"] == 200
    assert result.output["first"]
    assert len(secure.seen) == 2


LIBRARY = {
    "code/main.py": "import geolib\n\ndef main(args):\n    return geolib.describe()\n",
    # A networking library as many are: ssl imported and a context built at import time.
    "code/geolib.py": (
        "import ssl, urllib.request, http.client\n"
        "DEFAULT_CONTEXT = ssl.create_default_context()\n"
        "HAS_HTTPS = hasattr(http.client, 'HTTPSConnection')\n"
        "def describe():\n"
        "    return {'https': HAS_HTTPS, 'verify': DEFAULT_CONTEXT.verify_mode.name}\n"
    ),
}


def test_a_library_importing_ssl_at_import_time_works(engine, tmp_path) -> None:
    skill = make_skill(tmp_path, "geo", LIBRARY)
    result = engine.run(RunRequest(kind="skill", skill="geo", skills=[skill]))
    assert result.status == "completed", (result.error, result.logs)
    assert result.output == {"https": True, "verify": "CERT_REQUIRED"}


URLLIB3 = """
import sys
sys.path.insert(0, "/skills/libs")

def main(args):
    import urllib3
    from urllib3.util import ssl_
    ctx = ssl_.create_urllib3_context()
    pool = urllib3.PoolManager(ssl_context=ctx)
    try:
        pool.request("GET", "https://example.com/", retries=False)
        fetched = "no error"
    except urllib3.exceptions.HTTPError as exc:
        fetched = str(exc)
    return {"context": type(ctx).__name__, "fetched": fetched}
"""


def test_urllib3_imports_and_fails_to_connect_saying_why(engine, tmp_path) -> None:
    # The host's own urllib3 (pure Python, a dependency of the egress client), unchanged.
    import shutil

    import urllib3

    libs = tmp_path / "libs"
    shutil.copytree(Path(urllib3.__file__).parent, libs / "urllib3")
    result = engine.run(RunRequest(
        kind="code", code=URLLIB3, skills=[MountedSkill(name="libs", root=str(libs))],
    ))
    assert result.status == "completed", (result.error, result.logs)
    assert result.output["context"] == "SSLContext"
    assert "the sandbox has no sockets" in result.output["fetched"]
