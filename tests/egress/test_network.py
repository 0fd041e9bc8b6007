"""Network by permission, end to end over JSON-RPC: a run reaches only what its
skill requests *and* the operator grants, through the host; host-held secrets
never enter the guest.

Traffic goes only to the local test servers on 127.0.0.1 (HTTP and HTTPS with a
certificate from a throw-away CA the host trusts through this test's policy).
Refusals are shown with names that are never resolved (api.example.com) or with
the test servers' own loopback address, so a bug sends nothing off this machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trustme
from skillfiles import GUEST_BASE_ENV, write_skill
from starlette.testclient import TestClient

from tests.egress_server import LocalServer, serve
from wasmrun.blobs.store import FileBlobStore
from wasmrun.egress.grants import Grant
from wasmrun.egress.policy import EgressPolicy, parse_egress_policy
from wasmrun.sandbox import InProcessExecutor
from wasmrun.server import assemble, create_app
from wasmrun.settings import Settings
from wasmrun.tenants.policy import AccessPolicy

pytestmark = pytest.mark.images("stdlib", "data")  # on both images (tests/images.py)

FETCH_CODE = """\
from runtime import http

def main(args):
    return call(args)

def call(args):
    r = http.request(args.get("method", "GET"), args["url"], headers=args.get("headers"),
                     json=args.get("json"), timeout=args.get("timeout"))
    return {"status": r.status, "body": r.text(), "url": r.url, "type": r.headers.get("content-type")}
"""

SECRET_CODE = """\
import os
from runtime import http

def main(args):
    print("env:", dict(os.environ))
    r = http.post(args["url"], headers={"Authorization": "Bearer wasmrun-secret:DEMO_TOKEN"}, json={"x": 1})
    state = {k: v for k, v in globals().items() if k != "__builtins__"}
    return {"env": dict(os.environ), "globals": repr(state), "echo": r.json()}
"""

LEADS_CODE = """\
import os
from runtime import http

API = "/services/data/v59.0/sobjects/Lead"

def sync(args):
    headers = {"Authorization": "Bearer " + os.environ["SALESFORCE_API_KEY"]}
    ids = []
    for lead in args["leads"]:
        r = http.post(args["instance_url"] + API, headers=headers, json=lead)
        r.raise_for_status()
        ids.append(r.json()["id"])
    return {"summary": f"Synced {len(ids)} leads.", "ids": ids}
"""


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def ca_file(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return str(path)


@pytest.fixture(scope="module")
def web() -> Iterator[LocalServer]:
    with serve() as server:
        yield server


@pytest.fixture(scope="module")
def secure(ca: trustme.CA) -> Iterator[LocalServer]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost", "127.0.0.1").configure_cert(context)
    with serve(context, host_name="localhost") as server:
        server.api_key = "s3cret"
        yield server


@pytest.fixture(autouse=True)
def _clear(web: LocalServer, secure: LocalServer) -> None:
    web.seen.clear()
    secure.seen.clear()


def network_policy(
    web: LocalServer, secure: LocalServer, ca_file: str, in_bodies: tuple[str, ...] = (), **network: Any
) -> EgressPolicy:
    section: dict[str, Any] = {
        "allow_private_addresses": True,  # the test servers are on loopback
        "ca_file": ca_file,
        "max_response_bytes": 100_000,
        "max_requests": 8,
        "skills": {
            "net.*": [web.url, secure.url],
            "salesforce.*": [secure.url + "/services"],
        },
    }
    section.update(network)
    secrets = {"modes": {"OTHER_TOKEN": "env"}, "in_bodies": list(in_bodies)}
    return parse_egress_policy({"network": section, "secrets": secrets})


@pytest.fixture()
def skills_dir(skills_dir: Path, web: LocalServer, secure: LocalServer) -> Path:
    both = {"network": [web.url, secure.url]}
    write_skill(skills_dir, "net.fetch", code=FETCH_CODE, permissions=both)
    write_skill(skills_dir, "net.modest", code=FETCH_CODE, permissions={"network": [secure.url]})
    write_skill(skills_dir, "other.fetch", code=FETCH_CODE, permissions=both)  # not granted by the operator
    write_skill(skills_dir, "net.secret", code=SECRET_CODE, permissions={**both, "secrets": ["DEMO_TOKEN"]})
    write_skill(
        skills_dir, "net.legacy",
        code=(
            "import os\ndef main(args):\n    value = os.environ['OTHER_TOKEN']\n    print(value)\n"
            "    return [value, value == 'not-for-you']\n"
        ),
        permissions={"secrets": ["OTHER_TOKEN"]},
    )
    write_skill(
        skills_dir, "salesforce.leads.sync", code=LEADS_CODE,
        runtime={"language": "python", "entrypoint": "code/main.py", "export": "sync"},
        permissions={"network": ["https://*.salesforce.com", secure.url], "secrets": ["SALESFORCE_API_KEY"]},
    )
    return skills_dir


class Caller:
    """rpc over a server built with a given policy: `call(method, params)` -> the result."""

    def __init__(self, client: TestClient, settings: Settings, blobs: FileBlobStore, executor: InProcessExecutor) -> None:
        self.client, self.settings, self.blobs, self.executor = client, settings, blobs, executor

    @property
    def skills_dir(self) -> Path:
        return self.settings.skills_dirs[-1]

    def __call__(self, method: str, params: Any) -> dict[str, Any]:
        answer = self.client.post("/rpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert "result" in body, body
        return dict(body["result"])

    @contextmanager
    def with_policy(self, policy: EgressPolicy) -> Iterator[Caller]:
        """Another server (re-reading the skills folder) under `policy`."""
        with serve_with(self.settings, self.blobs, self.executor, policy) as other:
            yield other


@contextmanager
def serve_with(settings: Settings, blobs: FileBlobStore, executor: InProcessExecutor, policy: EgressPolicy) -> Iterator[Caller]:
    settings = dataclasses.replace(settings, egress=policy)
    with TestClient(create_app(assemble(settings, blobs=blobs, executor=executor)), base_url="http://localhost") as client:
        yield Caller(client, settings, blobs, executor)


@pytest.fixture()
def settings(settings: Settings, web: LocalServer, secure: LocalServer, ca_file: str) -> Settings:
    secrets = {**settings.secrets, "SALESFORCE_API_KEY": "sf-real-key-0001"}
    # The operator grants the secrets (the access policy) and the network (the egress policy).
    access = AccessPolicy(secret_grants=(
        Grant("net.*", ("DEMO_TOKEN", "OTHER_TOKEN")),
        Grant("salesforce.*", ("SALESFORCE_API_KEY",)),
    ))
    return dataclasses.replace(settings, secrets=secrets, access=access, egress=network_policy(web, secure, ca_file))


@pytest.fixture()
def call(settings: Settings, blob_store: FileBlobStore, executor: InProcessExecutor) -> Iterator[Caller]:
    with serve_with(settings, blob_store, executor, settings.egress) as caller:
        yield caller


def fetch(call: Callable[..., dict[str, Any]], skill: str = "net.fetch", **args: Any) -> dict[str, Any]:
    return call("execute_skill", {"name": skill, "args": args})


def refused(result: dict[str, Any], error_type: str = "NetworkNotAllowed") -> str:
    assert result["status"] == "failed", result
    assert result["error"]["type"] == error_type, result["error"]
    return str(result["error"]["message"])


# -- allowed requests ---------------------------------------------------------------


@pytest.mark.parametrize("which", ["web", "secure"])
def test_allowed_get_and_post_json(call: Caller, which: str, request: pytest.FixtureRequest) -> None:
    server: LocalServer = request.getfixturevalue(which)
    got = fetch(call, url=server.url + "/json")
    assert got["status"] == "completed", got
    assert got["output"]["status"] == 200 and json.loads(got["output"]["body"]) == {"hello": "world", "method": "GET"}
    assert got["output"]["type"] == "application/json"
    posted = fetch(call, method="POST", url=server.url + "/echo", json={"n": [1, 2]})
    echo = json.loads(posted["output"]["body"])
    assert echo["method"] == "POST" and json.loads(echo["body"]) == {"n": [1, 2]}
    assert echo["headers"]["Content-Type"] == "application/json"
    assert echo["headers"]["Host"] == server.url.split("//")[1]
    assert [s.path for s in server.seen] == ["/json", "/echo"]
    usage = posted["usage"]
    assert usage["http_requests"] == 1 and usage["http_bytes_out"] > 8 and usage["http_bytes_in"] > len(posted["output"]["body"])


def test_ipv6_loopback_when_the_operator_allows_it(call: Caller) -> None:
    with contextlib.ExitStack() as stack:
        try:
            server = stack.enter_context(serve(host_name="[::1]"))
        except OSError:
            pytest.skip("no IPv6 loopback here")
        write_skill(call.skills_dir, "net.six", code=FETCH_CODE, permissions={"network": [server.url]})
        policy = {"skills": {"net.six": [server.url]}}
        with call.with_policy(parse_egress_policy({"network": {**policy, "allow_private_addresses": True}})) as rpc:
            got = fetch(rpc, "net.six", url=server.url + "/echo")
            assert got["output"]["status"] == 200, got
            assert json.loads(got["output"]["body"])["headers"]["Host"] == f"[::1]:{server.port}"
        with call.with_policy(parse_egress_policy({"network": policy})) as rpc:
            assert "::1 is loopback" in refused(fetch(rpc, "net.six", url=server.url + "/echo"))
        assert len(server.seen) == 1


def test_redirect_within_the_allowlist_is_followed(call: Caller, web: LocalServer, secure: LocalServer) -> None:
    got = fetch(call, url=f"{web.url}/redirect?to={secure.url}/json")
    assert got["output"]["status"] == 200 and got["output"]["url"] == secure.url + "/json"
    assert got["usage"]["http_requests"] == 2


@pytest.mark.parametrize("which", ["web", "secure"])
def test_a_run_keeps_its_connection_alive(call: Caller, which: str, request: pytest.FixtureRequest) -> None:
    server: LocalServer = request.getfixturevalue(which)
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    return [http.get(args['base'] + path).status for path in ['/json', '/drop', '/json', '/json']]\n"
    )
    write_skill(call.skills_dir, "net.many", code=code, permissions={"network": [server.url]})
    before = server.connections
    with call.with_policy(network_policy(server, server, call.settings.egress.network.ca_file or "")) as rpc:
        got = rpc("execute_skill", {"name": "net.many", "args": {"base": server.url}})
    assert got["output"] == [200, 200, 200, 200], got
    # one connection for the first two; the server closed it after /drop, so a second one
    assert server.connections - before == 2
    assert got["usage"]["http_requests"] == 4


def test_credentials_stay_with_their_origin_across_redirects(call: Caller, web: LocalServer, secure: LocalServer) -> None:
    headers = {"Authorization": "Bearer abc", "X-Key": "wasmrun-secret:DEMO_TOKEN", "X-Plain": "kept"}
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    r = http.post(args['url'], headers=args['headers'], json={'a': 1})\n"
        "    return [r.status, r.url, r.json()['method']]\n"
    )
    write_skill(call.skills_dir, "net.hops", code=code,
                permissions={"network": [web.url, secure.url], "secrets": ["DEMO_TOKEN"]})
    with call.with_policy(network_policy(web, secure, call.settings.egress.network.ca_file or "")) as rpc:
        url = f"{web.url}/redirect?status=303&to={secure.url}/echo"
        got = rpc("execute_skill", {"name": "net.hops", "args": {"url": url, "headers": headers}})
        assert got["output"] == [200, secure.url + "/echo", "GET"], got  # 303: the next hop is a GET
        assert web.seen[0].headers["X-Key"] == "s3cret" and web.seen[0].headers["Authorization"] == "Bearer abc"
        hop = secure.seen[0].headers
        assert "Authorization" not in hop and "X-Key" not in hop and hop["X-Plain"] == "kept"
        # a redirect loop ends at the limit
        loop = f"{web.url}/loop"
        got = rpc("execute_skill", {"name": "net.hops", "args": {"url": loop, "headers": {}}})
        assert "more than 5 redirects" in refused(got, "NetworkLimitExceeded")


def test_urlopen_for_an_allowed_url(call: Caller, web: LocalServer) -> None:
    code = (
        "import json, urllib.request, urllib.error\n"
        "def main(args):\n"
        "    with urllib.request.urlopen(args['base'] + '/json', timeout=10) as f:\n"
        "        first = [f.status, json.load(f), f.headers['Content-Type']]\n"
        "    req = urllib.request.Request(args['base'] + '/echo', data=b'a=1', method='PUT')\n"
        "    echoed = json.load(urllib.request.urlopen(req))\n"
        "    try:\n"
        "        urllib.request.urlopen(args['base'] + '/status?code=404')\n"
        "    except urllib.error.HTTPError as e:\n"
        "        missing = e.code\n"
        "    return [first, echoed['method'], echoed['body'], missing]\n"
    )
    with call.with_policy(network_policy(web, web, "", run_code=[web.url])) as rpc:
        got = rpc("run_code", {"language": "python", "code": code, "args": {"base": web.url}})
    assert got["output"] == [[200, {"hello": "world", "method": "GET"}, "application/json"], "PUT", "a=1", 404], got


def test_tls_is_verified(call: Caller, web: LocalServer, secure: LocalServer, ca: trustme.CA) -> None:
    # without the test CA the host does not trust the server
    with call.with_policy(network_policy(web, secure, "")) as rpc:
        message = refused(fetch(rpc, url=secure.url + "/json"), "NetworkError")
    assert "TLS certificate of localhost could not be verified" in message
    # a trusted CA, but a certificate for another name
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("other.example").configure_cert(context)
    with serve(context, host_name="localhost") as wrong:
        write_skill(call.skills_dir, "net.wrongname", code=FETCH_CODE, permissions={"network": [wrong.url]})
        with call.with_policy(network_policy(web, wrong, call.settings.egress.network.ca_file or "")) as rpc:
            message = refused(fetch(rpc, "net.wrongname", url=wrong.url + "/json"), "NetworkError")
        assert "TLS certificate of localhost could not be verified" in message
        assert wrong.seen == []
    assert secure.seen == []


# -- refused requests ---------------------------------------------------------------


def test_host_outside_the_list_is_refused(call: Caller) -> None:
    message = refused(fetch(call, url="https://api.example.com/v1"))
    assert "NetworkNotAllowed: api.example.com is not in this skill's permissions.network" in message


def test_requested_but_not_granted_is_refused(call: Caller, web: LocalServer, secure: LocalServer) -> None:
    message = refused(fetch(call, "other.fetch", url=web.url + "/json"))
    assert "is not allowed for skill other.fetch by the server's network policy" in message
    # granted to net.* by the operator, but net.modest's manifest asks only for the HTTPS server
    message = refused(fetch(call, "net.modest", url=web.url + "/json"))
    assert "is not in this skill's permissions.network" in message
    assert web.seen == [] and secure.seen == []


def test_redirect_to_a_refused_host_is_refused(call: Caller, web: LocalServer) -> None:
    message = refused(fetch(call, url=f"{web.url}/redirect?to=http://api.example.com/steal"))
    assert "redirect to api.example.com is not in this skill's permissions.network" in message
    assert web.paths() == ["/redirect?to=http://api.example.com/steal"]


def test_loopback_is_refused_under_the_default_configuration(
    call: Caller, web: LocalServer, secure: LocalServer, ca_file: str
) -> None:
    policy = network_policy(web, secure, ca_file, allow_private_addresses=False)
    with call.with_policy(policy) as rpc:
        message = refused(fetch(rpc, url=web.url + "/json"))
        assert "127.0.0.1 is loopback" in message
        message = refused(fetch(rpc, url=secure.url + "/json"))
        assert "localhost resolves to an address that may not be reached" in message
    # the same address in other spellings (a manifest and a grant that name them, nothing listening)
    spellings = ["http://[::1]:9", "http://[::ffff:127.0.0.1]:9", "http://0.0.0.0:9", "http://[::ffff:169.254.169.254]:9"]
    write_skill(call.skills_dir, "net.spellings", code=FETCH_CODE, permissions={"network": spellings})
    policy = parse_egress_policy({"network": {"skills": {"net.spellings": spellings}}})
    with call.with_policy(policy) as rpc:
        found = [refused(fetch(rpc, "net.spellings", url=url + "/")) for url in spellings]
    assert "::1 is loopback" in found[0]
    assert "::ffff:7f00:1 is loopback" in found[1]
    assert "0.0.0.0 is unspecified" in found[2]
    assert "::ffff:a9fe:a9fe is metadata" in found[3]
    assert web.seen == [] and secure.seen == []


def test_oversized_response_is_cut_with_a_clear_error(call: Caller, web: LocalServer) -> None:
    assert fetch(call, url=web.url + "/big?n=99000")["status"] == "completed"
    message = refused(fetch(call, url=web.url + "/big?n=300000"), "NetworkLimitExceeded")
    assert "larger than this run's limit of 100000 bytes" in message


def test_request_count_is_bounded(call: Caller, web: LocalServer) -> None:
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    n = 0\n"
        "    try:\n"
        "        for _ in range(50):\n"
        "            http.get(args['url'])\n"
        "            n += 1\n"
        "    except http.NetworkLimitExceeded as e:\n"
        "        return [n, str(e)]\n"
    )
    write_skill(call.skills_dir, "net.loop", code=code, permissions={"network": [web.url]})
    # a fresh context re-reads the skills folder
    with call.with_policy(network_policy(web, web, "")) as rpc:
        got = rpc("execute_skill", {"name": "net.loop", "args": {"url": web.url + "/json"}})
    assert got["output"] == [8, "this run may make at most 8 requests"], got
    assert len(web.seen) == 8


def test_slow_server_is_interrupted_by_the_run_timeout(call: Caller, web: LocalServer) -> None:
    got = call("execute_skill", {"name": "net.fetch", "args": {"url": web.url + "/slow"}, "timeout_ms": 1500})
    assert refused(got, "Timeout") == "the run exceeded its time limit of 1500 ms"
    # the request's own timeout is an exception the code can handle
    got = fetch(call, url=web.url + "/slow", timeout=0.5)
    assert "timed out" in refused(got, "NetworkError")


def test_malformed_requests_are_clear_errors(call: Caller, web: LocalServer) -> None:
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    out = []\n"
        "    for method, url, headers in args['cases']:\n"
        "        try:\n"
        "            headers = {k: chr(0xDCFF) if v == 'LONE' else v for k, v in headers.items()}\n"
        "            http.request(method, url, headers=headers)\n"
        "            out.append('sent')\n"
        "        except (http.NetworkError, TypeError, ValueError) as e:\n"
        "            out.append(type(e).__name__ + ': ' + str(e)[:60])\n"
        "    return out\n"
    )
    base = web.url
    cases = [
        ["GET", base + "/json", {"X-Inject": "a\r\nHost: evil"}],
        ["GET", base + "/json", {"Host": "api.example.com"}],
        ["GET", base + "/json", {"Bad Name": "x"}],
        ["G ET", base + "/json", {}],
        ["GET", "file:///etc/passwd", {}],
        ["GET", "http://user:pw@127.0.0.1/", {}],
        ["GET", "http://" + "a" * 5000 + ".com/", {}],
        ["GET", base + "/json", {"X-Surrogate": "LONE"}],
    ]
    got = call("run_code", {"language": "python", "code": code, "args": {"cases": cases}})
    assert got["status"] == "completed", got
    # run_code has no network: every case fails before anything is sent
    assert all(line.startswith(("NetworkNotAllowed", "NetworkError")) for line in got["output"]), got
    with call.with_policy(network_policy(web, web, "", run_code=[base])) as rpc:
        got = rpc("run_code", {"language": "python", "code": code, "args": {"cases": cases}})
    out = got["output"]
    assert out[0].startswith("NetworkError: the value of header X-Inject contains a line break")
    assert out[1].startswith("NetworkError: the Host header is set by the host")
    assert out[2].startswith("NetworkError: 'Bad Name' is not a valid header name")
    assert out[3].startswith("NetworkError: 'G ET' is not an HTTP method")
    assert out[4].startswith("NetworkError: only http and https URLs")
    assert out[5].startswith("NetworkError: credentials in the URL")
    assert out[6].startswith("NetworkError: ")
    assert out[7].startswith("NetworkError: ")
    assert web.seen == []


# -- run_code and mounted skills -------------------------------------------------------


def test_run_code_without_operator_opt_in_is_refused(call: Caller, web: LocalServer) -> None:
    code = "from runtime import http\ndef main(args):\n    return http.get(args['url']).status\n"
    got = call("run_code", {"language": "python", "code": code, "args": {"url": web.url + "/json"}})
    assert "run_code has no network access (the operator has not enabled it)" in refused(got)
    with call.with_policy(network_policy(web, web, "", run_code=[web.url])) as rpc:
        assert rpc("run_code", {"language": "python", "code": code, "args": {"url": web.url + "/json"}})["output"] == 200
        got = rpc("run_code", {"language": "python", "code": code, "args": {"url": "https://api.example.com/"}})
        assert "not in the operator's network allowlist for run_code" in refused(got)
    assert web.paths() == ["/json"]


def test_a_mounted_skill_does_not_lend_its_allowlist(call: Caller, web: LocalServer) -> None:
    args = {"url": web.url + "/json"}
    assert fetch(call, **args)["output"]["status"] == 200  # the skill itself may
    code = "from skills.net.fetch import call\ndef main(args):\n    return call(args)\n"
    got = call("run_code", {"language": "python", "code": code, "args": args, "mount_skills": ["net.fetch"]})
    assert "run_code has no network access" in refused(got)
    assert web.paths() == ["/json"]


# -- secrets ----------------------------------------------------------------------------


def test_host_secret_reaches_the_server_but_never_the_guest(call: Caller, secure: LocalServer) -> None:
    got = fetch(call, "net.secret", url=secure.url + "/echo")
    assert got["status"] == "completed", got
    assert secure.seen[0].headers["Authorization"] == "Bearer s3cret"  # the real value, on the wire
    out = got["output"]
    assert out["env"] == {**GUEST_BASE_ENV, "DEMO_TOKEN": "wasmrun-secret:DEMO_TOKEN"}
    assert "'os'" in out["globals"] and "s3cret" not in out["globals"]
    # the server echoed the value back: the guest got it redacted
    assert out["echo"]["headers"]["Authorization"] == "Bearer wasmrun-secret:DEMO_TOKEN"
    assert "s3cret" not in json.dumps(got)


def test_placeholder_to_a_host_not_allowed_is_refused(call: Caller, web: LocalServer) -> None:
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    return http.get(args['url'], headers={'Authorization': 'wasmrun-secret:DEMO_TOKEN'}).status\n"
    )
    write_skill(call.skills_dir, "net.leaky", code=code, permissions={"network": [web.url], "secrets": ["DEMO_TOKEN"]})
    with call.with_policy(network_policy(web, web, "")) as rpc:
        got = rpc("execute_skill", {"name": "net.leaky", "args": {"url": "https://api.example.com/?k=wasmrun-secret:DEMO_TOKEN"}})
        assert "api.example.com is not in this skill's permissions.network" in refused(got)
        # a secret this run was not granted is not substituted anywhere
        got = rpc("run_code", {"language": "python", "code": code.replace("DEMO_TOKEN", "OTHER_TOKEN"),
                               "args": {"url": web.url + "/echo"}})
        assert "NetworkNotAllowed" in refused(got)
    assert web.seen == []


def test_secret_in_the_url_query_is_substituted(call: Caller, web: LocalServer) -> None:
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    plain = http.get(args['url'] + '?key=wasmrun-secret:DEMO_TOKEN').json()['path']\n"
        "    encoded = http.get(args['url'], params={'q': 'a b', 'key': 'wasmrun-secret:DEMO_TOKEN'}).json()['path']\n"
        "    return [plain, encoded]\n"
    )
    write_skill(call.skills_dir, "net.query", code=code, permissions={"network": [web.url], "secrets": ["DEMO_TOKEN"]})
    with call.with_policy(network_policy(web, web, "")) as rpc:
        got = rpc("execute_skill", {"name": "net.query", "args": {"url": web.url + "/echo"}})
    assert web.paths() == ["/echo?key=s3cret", "/echo?q=a+b&key=s3cret"]
    assert got["output"] == ["/echo?key=wasmrun-secret:DEMO_TOKEN", "/echo?q=a+b&key=wasmrun-secret:DEMO_TOKEN"]


def test_secret_in_a_request_body_is_substituted(call: Caller, web: LocalServer, secure: LocalServer) -> None:
    code = (
        "import urllib.parse\n"
        "from runtime import http\n"
        "def main(args):\n"
        "    url = args['url']\n"
        "    http.post(url + '/echo', json={'api_key': 'wasmrun-secret:DEMO_TOKEN', 'n': 1})\n"
        "    form = urllib.parse.urlencode({'key': 'wasmrun-secret:DEMO_TOKEN'})\n"
        "    http.post(url + '/echo', body=form, headers={'Content-Type': 'application/x-www-form-urlencoded'})\n"
        "    r = http.post(url + '/echo', body=b'token=wasmrun-secret:DEMO_TOKEN',\n"
        "                  headers={'Content-Type': 'text/plain'})\n"
        "    return r.json()['body']\n"
    )
    write_skill(call.skills_dir, "net.body", code=code, permissions={"network": [web.url], "secrets": ["DEMO_TOKEN"]})
    with call.with_policy(network_policy(web, web, "")) as rpc:  # bodies not allowed: refused, nothing sent
        got = rpc("execute_skill", {"name": "net.body", "args": {"url": web.url}})
        assert "not in a request body" in refused(got) and "[secrets] in_bodies" in refused(got)
        assert web.seen == []
    with call.with_policy(network_policy(web, web, "", in_bodies=("DEMO_TOKEN",))) as rpc:
        got = rpc("execute_skill", {"name": "net.body", "args": {"url": web.url}})
    assert got["status"] == "completed", got
    assert json.loads(web.seen[0].body) == {"api_key": "s3cret", "n": 1}
    assert web.seen[1].body == b"key=s3cret"
    assert web.seen[2].body == b"token=s3cret"
    assert got["output"] == "token=wasmrun-secret:DEMO_TOKEN"  # the echo came back redacted


def test_a_secret_in_a_body_does_not_follow_a_redirect_to_another_origin(
    call: Caller, web: LocalServer, secure: LocalServer
) -> None:
    code = (
        "from runtime import http\n"
        "def main(args):\n"
        "    r = http.post(args['url'], json={'api_key': 'wasmrun-secret:DEMO_TOKEN'})\n"
        "    return [r.status, r.json()['body']]\n"
    )
    write_skill(call.skills_dir, "net.bodyhop", code=code,
                permissions={"network": [web.url, secure.url], "secrets": ["DEMO_TOKEN"]})
    policy = network_policy(web, secure, call.settings.egress.network.ca_file or "", in_bodies=("DEMO_TOKEN",))
    with call.with_policy(policy) as rpc:
        same = rpc("execute_skill", {"name": "net.bodyhop", "args": {"url": f"{web.url}/redirect?status=307&to=/echo"}})
        assert same["output"] == [200, '{"api_key": "wasmrun-secret:DEMO_TOKEN"}'], same  # same origin: sent again
        other = f"{web.url}/redirect?status=307&to={secure.url}/echo"
        got = rpc("execute_skill", {"name": "net.bodyhop", "args": {"url": other}})
        assert "only sent to the origin it was written for" in refused(got)
    assert secure.seen == []


def test_env_mode_secret_is_redacted_in_what_the_run_returns(call: Caller) -> None:
    got = call("execute_skill", {"name": "net.legacy"})
    assert got["output"] == ["wasmrun-secret:OTHER_TOKEN", True]  # the guest had the value itself
    assert got["logs_preview"] == "wasmrun-secret:OTHER_TOKEN\n"
    assert "not-for-you" not in json.dumps(got)


# -- the spec's example ----------------------------------------------------------------------


def test_salesforce_leads_sync_against_a_local_fake(call: Caller, secure: LocalServer) -> None:
    leads = [{"LastName": "Lovelace", "Company": "Analytical Engines"}, {"LastName": "Hopper", "Company": "Navy"}]
    secure.api_key = "sf-real-key-0001"
    try:
        got = call("execute_skill", {"name": "salesforce.leads.sync",
                                     "args": {"instance_url": secure.url, "leads": leads}})
    finally:
        secure.api_key = "s3cret"
    assert got["status"] == "completed", got
    assert got["output"]["ids"] == ["00Q000000000000001", "00Q000000000000002"]
    assert got["summary"] == "Synced 2 leads."
    assert secure.leads[-2:] == leads
    assert all(s.headers["Authorization"] == "Bearer sf-real-key-0001" for s in secure.seen)
    assert "sf-real-key-0001" not in json.dumps(got)
    # the operator grants salesforce.* only the API's path
    got = call("execute_skill", {"name": "salesforce.leads.sync",
                                 "args": {"instance_url": secure.url + "/elsewhere", "leads": leads}})
    assert "is not allowed for skill salesforce.leads.sync" in refused(got)


# -- tenants ------------------------------------------------------------------------------


def test_a_tenant_network_grant_is_that_tenant_s_only(call: Caller, web: LocalServer) -> None:
    from wasmrun.tenants.store import TenantStore

    store = TenantStore(call.settings.data_dir)
    keys = {"alice": store.add("alice"), "bob": store.add("bob")}
    policy = parse_egress_policy({
        "network": {"allow_private_addresses": True},
        "tenants": {"alice": {"network": {"skills": {"user.fetch": [web.url]}}}},
    })
    manifest = {
        "name": "user.fetch", "version": "1.0.0", "description": "Fetches.", "kind": "action",
        "runtime": {"language": "python", "entrypoint": "code/main.py", "export": "main"},
        "permissions": {"network": [web.url]},
    }
    with call.with_policy(policy) as server:
        def as_tenant(who: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            answer = server.client.post("/rpc", json=body, headers={"Authorization": f"Bearer {keys[who]}"})
            assert answer.status_code == 200, answer.text
            return dict(answer.json()["result"])

        for who in ("alice", "bob"):  # each tenant creates its own user.fetch
            as_tenant(who, "create_skill", {"manifest": manifest, "skill_md": "# fetch\n",
                                            "files": [{"path": "code/main.py", "content": FETCH_CODE}]})
        args = {"url": web.url + "/json"}
        assert as_tenant("alice", "execute_skill", {"name": "user.fetch", "args": args})["output"]["status"] == 200
        got = as_tenant("bob", "execute_skill", {"name": "user.fetch", "args": args})
        assert "is not allowed for skill user.fetch by the server's network policy" in refused(got)
    assert web.paths() == ["/json"]
