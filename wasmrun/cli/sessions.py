"""`wasmrun session ...` and `wasmrun exec ...`: a server's sessions and commands from the
command line, through the typed client.

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

    wasmrun exec [--session SID] [--cwd DIR] [--env K=V]... [--timeout-ms N] -- 'ls -la | wc -l'
    wasmrun exec -- grep -rn TODO .            (several words: an argv, no shell expansion)
    wasmrun exec -i -- 'wc -l' < data.csv       (-i: our stdin is the command's)

`exec` runs a command line with the sandbox's shell (docs/commands.md) and behaves as the
command would: its stdout and stderr on ours, its exit code ours. A run a limit stopped
exits 124 when it ran out of time (as timeout(1) does), else 125; a refused call 125 too,
with the server's message (a command's own codes stay its own).
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
    from wasmrun.cli import limits as cli_limits
    from wasmrun.cli.help import command

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
    cli_limits.add_limit_shorthands(create, ("memory_mb", "timeout_ms"), "the server's")
    create.add_argument("--idle-timeout-s", type=int,
                        help="end the session after this many seconds unused (default: the server's)")
    create.add_argument("--skill", action="append", default=[],
                        help="mount a skill in every run; repeatable (default none)")
    run = command(sub, "run", "run a Python file (- for stdin) inside a session; prints the result as JSON",
                  "wasmrun session run ses_... analysis.py")
    run.add_argument("session_id", help="the id create printed")
    run.add_argument("file", metavar="FILE.py", help="the code: a final expression or main(args); - reads stdin")
    cli_limits.add_limit_shorthands(run, ("timeout_ms",), "the session's")
    fork = command(sub, "fork", "copy a session (memory and files) into a new one and print the new one's id",
                   "wasmrun session fork ses_...")
    fork.add_argument("session_id", help="the session's id")
    fork.add_argument("--json", action="store_true", help="print the new session's record as JSON (default: its id)")
    command(sub, "close", "end a session and delete its state", "wasmrun session close ses_...").add_argument(
        "session_id", help="the session's id"
    )
    command(sub, "list", "list your open sessions", "wasmrun session list")
    run_one = command(commands, "exec", "run a shell command line in a sandbox on a running server (docs/commands.md)",
                      "wasmrun exec --session ses_... -- 'ls -la | grep csv'")
    run_one.add_argument("--url", default=None, help=f"the server (WASMRUN_URL; default {DEFAULT_URL})")
    run_one.add_argument("--api-key", default=None, help="the tenant's API key (WASMRUN_API_KEY; default none)")
    run_one.add_argument("--session", default=None, metavar="SID", help="run in this session (default: a fresh sandbox)")
    run_one.add_argument("--cwd", default=None, help="the working folder (default: /workspace)")
    run_one.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                         help="an environment variable for the command; repeatable (default: none)")
    run_one.add_argument("-i", "--stdin", action="store_true", help="give our standard input to the command (default none)")
    cli_limits.add_limit_shorthands(run_one, ("timeout_ms",), "the server's")
    run_one.add_argument("words", nargs=argparse.REMAINDER, metavar="COMMAND",
                         help="one word: a command line in bash syntax; several: an argv (after --)")


EXIT_TIMED_OUT = 124  # as timeout(1)
EXIT_NOT_RUN = 125  # the sandbox could not run it (as docker run's 125)


def main(args: argparse.Namespace) -> int:
    if args.command == "exec":
        return _exec(args)
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


def _exec(args: argparse.Namespace) -> int:
    words = args.words[1:] if args.words[:1] == ["--"] else args.words
    if not words:
        print("wasmrun exec: give the command: wasmrun exec -- 'ls -la'", file=sys.stderr)
        return EXIT_NOT_RUN
    env = {}
    for pair in args.env:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            print(f"wasmrun exec: --env {pair!r}: expected NAME=VALUE", file=sys.stderr)
            return EXIT_NOT_RUN
        env[name] = value
    # Only when asked (as `docker run -i`): an open pipe nobody writes to would hold us forever.
    stdin = sys.stdin.read() if args.stdin else None
    url = args.url or os.environ.get("WASMRUN_URL") or DEFAULT_URL
    with Client(url, api_key=args.api_key or os.environ.get("WASMRUN_API_KEY") or None) as client:
        try:
            result = client.run_command(words[0] if len(words) == 1 else words, cwd=args.cwd, env=env, stdin=stdin,
                                        timeout_ms=args.timeout_ms, session_id=args.session)
        except RPCError as exc:
            print(f"wasmrun exec: {exc.message}", file=sys.stderr)
            return EXIT_NOT_RUN
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if isinstance(result.exit_code, int):
        return result.exit_code
    error = result.error if result.error else None
    print(f"wasmrun exec: {error.type}: {error.message}" if error else "wasmrun exec: the run failed", file=sys.stderr)
    return EXIT_TIMED_OUT if error is not None and error.type == "Timeout" else EXIT_NOT_RUN
