"""The row registry: every start-up and compute row of `wasmrun bench`, in one place.

A row is one step of the interleaved run: `measure(bench)` takes one sample of
every system the row compares (wasmrun's and its counterparts') and answers
{system label: seconds}. `absent(bench)` says why a row cannot be measured here
(None when it can); an absent row is listed with that reason, never an error.

A feature adds its row here, with `startup_row(...)`: the data image's rows
(datarows.py) and session resume are below, absent where the feature is not here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from wasmrun.bench import chartrows, datarows, doors, e2brow, packagerows, toolrows
from wasmrun.bench.interleave import Samples, alternating, paced
from wasmrun.bench.peers import Peer
from wasmrun.bench.systems import (
    HELLO,
    PACED,
    SESSION_NEXT,
    TEXT_STATS_CALL,
    InProcess,
    Native,
    new_session,
    session_hello,
    text_stats_request,
)
from wasmrun.bench.workloads import COMPUTE, Workload

if TYPE_CHECKING:
    from wasmrun.bench.run import Bench


@dataclass(frozen=True)
class Row:
    key: str
    section: str  # "startup" or "compute"
    label: str
    what: str  # what the row measures, for the table's notes and the HTML report
    measure: Callable[[Bench], Samples]
    absent: Callable[[Bench], str | None] = lambda bench: None
    burst: int = 5  # samples per round (slow rows take fewer)
    baseline: str = Native.label  # the column the ratios divide by
    extra: dict[str, str] = field(default_factory=dict)


STARTUP: list[Row] = []
COMPUTE_ROWS: list[Row] = []


def startup_row(row: Row) -> Row:
    STARTUP.append(row)
    return row


def _peer_steps(bench: Bench, source: str, key: str) -> list[tuple[str, Callable[[], float]]]:
    steps: list[tuple[str, Callable[[], float]]] = []
    for peer in bench.peers:
        if (peer.label, key) in bench.unsupported or not bench.peer_due(peer):
            continue

        def step(peer: Peer = peer) -> float:
            return peer.sample(source)

        steps.append((peer.label, step))
    return steps


def _fresh_hello(bench: Bench) -> Samples:
    return alternating(bench, [
        (InProcess.label, lambda: bench.inproc.sample(HELLO)),
        (Native.label, lambda: bench.native.sample(HELLO)),
        *_peer_steps(bench, HELLO, "hello"),
    ])


def _http_hello(bench: Bench) -> Samples:
    return alternating(bench, [
        ("wasmrun, HTTP keep-alive", lambda: bench.http.sample(HELLO)),
        (Native.label, lambda: bench.native.sample(HELLO)),
    ])


def _agent_pace(bench: Bench) -> Samples:
    return paced(bench, PACED, lambda: bench.http.sample(HELLO), Native.label, lambda: bench.native.sample(HELLO))


def _skill_run(bench: Bench) -> Samples:
    request = text_stats_request()
    return alternating(bench, [
        ("wasmrun, in-process", lambda: bench.inproc.run(request)),
        ("wasmrun, HTTP keep-alive", lambda: bench.http.timed_call("execute_skill", TEXT_STATS_CALL)),
        ("hello in-process (for scale)", lambda: bench.inproc.sample(HELLO)),
    ])


def _sessions_absent(bench: Bench) -> str | None:
    from wasmrun.protocol.methods import METHODS

    return None if "create_session" in METHODS else "sessions are not in this build"


def _session_resume(bench: Bench) -> Samples:
    """The next run of a session (its state kept between runs) against a fresh run, over HTTP."""
    if bench.session_id is None:
        bench.session_id = new_session(bench.http)
    params = session_hello(bench.session_id)
    return alternating(bench, [
        (SESSION_NEXT, lambda: bench.http.timed_call("run_code", params)),
        ("wasmrun, HTTP keep-alive", lambda: bench.http.sample(HELLO)),
    ])


startup_row(Row("fresh", "startup", "fresh sandbox hello, in-process",
                "SandboxEngine.run of print('hello') in a fresh instance, against a native spawn and the peers' "
                "fresh interpreters", _fresh_hello, burst=8))
startup_row(Row("http", "startup", "hello over HTTP keep-alive",
                "run_code of print('hello') back to back on one keep-alive connection to `wasmrun serve`",
                _http_hello, burst=6))
startup_row(Row("agent", "startup", "hello at an agent's pace",
                "run_code hello with 50-200 ms gaps, a native python3 -I -S spawn in each gap (busy neighbour)",
                _agent_pace, burst=4))
startup_row(Row("skill", "startup", "skill run (execute_skill text.stats)",
                "the bundled text.stats skill from its skill's pages, in-process and over HTTP",
                _skill_run, burst=4, baseline="hello in-process (for scale)"))
startup_row(Row("data-agent", "startup", "data image: hello at an agent's pace",
                "run_code hello on `wasmrun serve --image data` with 50-200 ms gaps, a native python3 -I -S spawn in "
                "each gap", datarows.agent_pace, absent=datarows.absent, burst=4))
startup_row(Row("data-skill", "startup", "data image: skill run (execute_skill text.stats)",
                "the bundled text.stats skill on the data image from its skill's pages, in-process and over HTTP",
                datarows.skill_run, absent=datarows.absent, burst=4, baseline=datarows.DATA_HELLO))
# The data image's rows (datarows.py): absent, with the line saying how to build it, until it is built.
startup_row(Row("data-fresh", "startup", "data image: hello, in-process",
                "DataSandboxEngine.run of print('hello') in a fresh instance of the data image (numpy, pandas, "
                "matplotlib.pyplot imported in the image's memory), beside the stdlib image's and a native spawn",
                datarows.fresh_hello, absent=datarows.absent, burst=6))
startup_row(Row("data-http", "startup", "data image: hello over HTTP keep-alive",
                "run_code hello back to back on one keep-alive connection to `wasmrun serve --image data` "
                "(one worker), beside the stdlib server's", datarows.http_hello, absent=datarows.absent, burst=5))
startup_row(Row("data-imports", "startup", "data image: import numpy, pandas, matplotlib.pyplot",
                "a run importing numpy, pandas and matplotlib.pyplot, in-process, against a data-image hello",
                datarows.imports, absent=datarows.absent, burst=4, baseline=datarows.DATA_HELLO))
startup_row(Row("data-pandas", "startup", "data image: a pandas job (20,000 rows, groupby + describe)",
                "a run building a 20,000-row DataFrame and describing it by group, in-process",
                datarows.pandas_job, absent=datarows.absent, burst=2, baseline=datarows.DATA_HELLO))
startup_row(Row("session", "startup", "session resume (next run of a session)",
                "run_code in a session created once (its state kept between runs), against a fresh run, over HTTP",
                _session_resume, absent=_sessions_absent, burst=4, baseline="wasmrun, HTTP keep-alive"))
startup_row(Row("data-session", "startup", "data image: session resume (next run of a session)",
                "run_code in a session created once on `wasmrun serve --image data`, against a fresh run there, over "
                "HTTP", datarows.session_resume, absent=datarows.absent, burst=4, baseline=datarows.DATA_HTTP))
startup_row(Row("data-commands", "startup", "data image: commands in a session (run_command)",
                "`ls` and `python -c 'print(1)'` through run_command in a session created once on `wasmrun serve "
                "--image data` (the shell inside the guest), against the session's next run_code hello; goal <= 2x",
                datarows.session_commands, absent=datarows.absent, burst=4, baseline=datarows.DATA_SESSION_NEXT))
startup_row(Row("e2b", "startup", "E2B SDK: Sandbox.create() to the first run_code result",
                "E2B's own Python SDK against the server's E2B front: create a sandbox (a session), run `1 + 1`, "
                "read its result; beside a fresh run over HTTP", e2brow.create_to_first_result,
                absent=e2brow.absent, burst=3, baseline=e2brow.HTTP_HELLO))
# The other doors (doors.py): plain httpx2 and websockets clients, a JSON-RPC hello through the same client.
startup_row(Row("jupyter", "startup", "Jupyter door: POST /api/kernels to the first execute_reply",
                "create a kernel (a session), open its channels WebSocket, execute `1+1`, until its execute_reply "
                "(the result read); beside a JSON-RPC run_code hello through the same HTTP client",
                doors.jupyter, burst=3, baseline=doors.RPC_HELLO))
startup_row(Row("azure", "startup", "Azure door: code/execute of 1+1 with a new identifier",
                "one `code/execute` call whose identifier is new (its session made by the call), until the "
                "answer with result 2; beside a JSON-RPC run_code hello through the same HTTP client",
                doors.azure, burst=3, baseline=doors.RPC_HELLO))
# Code mode (toolrows.py): one tool call's round trip against two plain calls.
startup_row(Row("code-mode", "startup", "code mode: a run calling one tool, answered at once",
                "run_code calling one of the client's tools, then submit_tool_results with its answer, until the "
                "result; beside a run_code hello and one list_sessions (two plain calls, the same connection); "
                "goal: the round trip adds <= 1 ms", toolrows.round_trip, burst=4, baseline=toolrows.TWO_CALLS))
# Packages on demand (packagerows.py): absent where pip's index does not answer.
startup_row(Row("packages-cached", "startup", "packages: a cached set's mount (run_code packages=[...])",
                f"run_code hello with `packages=[\"{packagerows.CACHED}\"]` (the set installed once before), "
                "the same hello without packages, and `import humanize` from the set; goal: the set adds <= 5 ms",
                packagerows.cached, absent=packagerows.absent, burst=4, baseline=packagerows.WITHOUT))
startup_row(Row("packages-new", "startup", "packages: a new small pure package, importable after",
                "run_code `import humanize` asking for a version this run has not installed (pip resolves it "
                "from the index, the wheel is downloaded and unpacked, the run imports it); beside a hello",
                packagerows.new_package, absent=packagerows.absent_new, burst=1, baseline=packagerows.WITHOUT))


def _compute(workload: Workload) -> Callable[[Bench], Samples]:
    def measure(bench: Bench) -> Samples:
        source = workload.source(bench.scale)
        steps: list[tuple[str, Callable[[], float]]] = [
            (InProcess.label, lambda: bench.inproc.compute(source)),
            (Native.label, lambda: bench.native.compute(source)),
        ]
        if bench.data is not None:  # what `auto`, the default image, runs when it is built
            data = bench.data
            steps.append((datarows.DATA_INPROC, lambda: data.inproc.compute(source)))
        for peer in bench.peers:
            if (peer.label, workload.name) in bench.unsupported or not bench.peer_due(peer, compute=True):
                continue
            code = source if peer.times_itself else workload.untimed(bench.scale)

            def step(peer: Peer = peer, code: str = code) -> float:
                seconds = peer.request(code, fresh=False)
                # A peer that cannot time itself: its call less its own hello (its start-up).
                return seconds if peer.times_itself else max(0.0, seconds - bench.peer_hello(peer))

            steps.append((peer.label, step))
        return alternating(bench, steps, workload.name)
    return measure


for _w in COMPUTE:
    COMPUTE_ROWS.append(Row(f"compute:{_w.name}", "compute", _w.name, f"N={_w.n} at full size", _compute(_w), burst=1))
# Charts on the data image against this Python's matplotlib (chartrows.py, issue #49).
for _c in chartrows.CHARTS:
    COMPUTE_ROWS.append(Row(_c.key, "compute", _c.label, chartrows.what(_c), chartrows.measure(_c),
                            absent=chartrows.absent, burst=1, baseline=chartrows.NATIVE))

__all__ = ["COMPUTE_ROWS", "STARTUP", "Row", "startup_row"]
