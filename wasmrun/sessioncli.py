"""`wasmrun session ...`: a server's sessions from the command line, through the typed client.

    wasmrun session create [--memory-mb N] [--idle-timeout-s N] [--skill NAME]...
    wasmrun session run SESSION_ID FILE.py      (or - for stdin)
    wasmrun session fork SESSION_ID
    wasmrun session close SESSION_ID
    wasmrun session list

The server is --url (WASMRUN_URL, default http://127.0.0.1:8080), the key
--api-key (WASMRUN_API_KEY). `create` and `fork` print the new session's id alone
(`SID=$(wasmrun session create)`; --json prints its whole record), the others the
result as JSON; `run` exits 1 when the run failed, any command 2 when the server
refused the call.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import msgspec

from wasmrun.client import DEFAULT_URL, Client
from wasmrun.protocol.errors import RPCError
from wasmrun.protocol.types import RunLimits


def add_parser(commands: Any) -> None:
    from wasmrun import limitcli
    from wasmrun.cli_help import command

    session = command(
        commands, "session", "create, run in, fork, close and list sessions on a running server",
        "wasmrun session create --memory-mb 512",
    )
    session.add_argument("--url", default=None, help=f"the server (WASMRUN_URL; default {DEFAULT_URL})")
    session.add_argument("--api-key", default=None, help="the tenant's API key (WASMRUN_API_KEY; default none)")
    sub = session.add_subparsers(dest="session_command", required=True)
    create = command(sub, "create", "start a new Python session and print its session_id (--json: its whole record)",
                     "SID=$(wasmrun session create --idle-timeout-s 1800 --skill data.csv.profile)")
    create.add_argument("--json", action="store_true", help="print the session's whole record as JSON (default: its id)")
    limitcli.add_limit_shorthands(create, ("memory_mb", "timeout_ms"), "the server's")
    create.add_argument("--idle-timeout-s", type=int,
                        help="end the session after this many seconds unused (default: the server's)")
    create.add_argument("--skill", action="append", default=[],
                        help="mount a skill in every run; repeatable (default none)")
    run = command(sub, "run", "run a Python file (- for stdin) inside a session; prints the result as JSON",
                  "wasmrun session run ses_... analysis.py")
    run.add_argument("session_id", help="the id create printed")
    run.add_argument("file", metavar="FILE.py", help="the code: a final expression or main(args); - reads stdin")
    limitcli.add_limit_shorthands(run, ("timeout_ms",), "the session's")
    fork = command(sub, "fork", "copy a session (memory and files) into a new one and print the new one's id",
                   "wasmrun session fork ses_...")
    fork.add_argument("session_id", help="the session's id")
    fork.add_argument("--json", action="store_true", help="print the new session's record as JSON (default: its id)")
    command(sub, "close", "end a session and delete its state", "wasmrun session close ses_...").add_argument(
        "session_id", help="the session's id"
    )
    command(sub, "list", "list your open sessions", "wasmrun session list")


def main(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("WASMRUN_URL") or DEFAULT_URL
    api_key = args.api_key or os.environ.get("WASMRUN_API_KEY") or None
    with Client(url, api_key=api_key) as client:
        try:
            result = _call(client, args)
        except RPCError as exc:
            print(f"wasmrun: {exc.message}", file=sys.stderr)
            return 2
    new_id = getattr(result, "session_id", None)
    if args.session_command in ("create", "fork") and not args.json and isinstance(new_id, str):
        print(new_id)  # what the help promises: the id, alone, for a shell variable
        return 0
    print(msgspec.json.format(msgspec.json.encode(result), indent=2).decode())
    return 1 if getattr(result, "status", "completed") == "failed" else 0


def _call(client: Client, args: argparse.Namespace) -> msgspec.Struct:
    command = args.session_command
    if command == "create":
        limits = RunLimits(memory_mb=args.memory_mb, timeout_ms=args.timeout_ms)
        return client.create_session(limits, args.idle_timeout_s, args.skill)
    if command == "run":
        code = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
        return client.run_code(code, timeout_ms=args.timeout_ms, session_id=args.session_id)
    if command == "fork":
        return client.fork_session(args.session_id)
    if command == "close":
        return client.close_session(args.session_id)
    return client.list_sessions()
