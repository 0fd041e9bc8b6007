"""The `wasmrun` command.

    wasmrun serve [--host H] [--port P] [--data-dir D] [--skills-dir S]... [--workers N] [--secrets-file F]
                  [--policy-file F] [--insecure] [--audit-log PATH] [--blob-ttl SECONDS] [--database-url URL]
                  [--blob-store s3://BUCKET?endpoint=URL&region=R]
    wasmrun tenants add NAME [--limit NAME=N]... [--data-dir D]   (prints the new API key)
    wasmrun tenants list|rotate NAME|revoke NAME [--old]|set NAME --limit NAME=N... [--data-dir D]
                                  (every tenants command: [--database-url URL] for the shared database's tenants)
    wasmrun migrate --database-url URL   bring the shared database's schema up to date
    wasmrun skills list [--data-dir D] [--skills-dir S]...
    wasmrun skills check DIR...
    wasmrun skills add PATH [--data-dir D]
    wasmrun mcp [--data-dir D] [--skills-dir S]... [--workers N] [--secrets-file F] [--policy-file F] [--with-create-skill]
    wasmrun tools [--format openai|anthropic|mcp|jsonschema] [--strict] [--with-create-skill]
    wasmrun run FILE.py [--mount SKILL]... [--arg KEY=VALUE]... [--blob NAME=PATH]...
                        [--entrypoint NAME] [--timeout-ms N] [--memory-mb N] [--no-stream]
                        (the run's output on stderr as it comes, the result as JSON on stdout)
    wasmrun warm                  compile the guest to machine code now (else the first start does)
    wasmrun doctor [--data-dir D] versions, caches, free disk; exits 1 if something is wrong
    wasmrun bench [--quick] [--cold] [--tti N] [--json F] [--html F] [--readme [README.md]]
                  [--from-json F] [--compare OLD.json] [--code FILE] [--schema]
                                  start-up (cold and warm), time to interactive, compute and memory
                                  against native CPython and the peers
    wasmrun --version
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from wasmrun.cli import bench, cache, images, packages, run, sessions
from wasmrun.cli import help as cli_help
from wasmrun.cli import limits as cli_limits
from wasmrun.database import DatabaseError
from wasmrun.settings import Settings
from wasmrun.tools import FORMATS

DATA_DIR_HELP = "where blobs, created skills and tenants live (WASMRUN_DATA_DIR; default ~/.local/share/wasmrun)"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, metavar="DIR", help=DATA_DIR_HELP)
    parser.add_argument(
        "--skills-dir", type=Path, action="append", metavar="DIR",
        help="another read-only folder of skills; repeatable (WASMRUN_SKILLS_DIRS; default none: the bundled"
        " skills always load)",
    )


def _database_url(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url", metavar="URL",
        help="postgresql://... shared by several servers: tenants, keys and the audit log (WASMRUN_DATABASE_URL;"
        " default none: files under the data dir)",
    )


def _policy_and_secrets(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--workers", type=int, metavar="N",
        help="sandboxes running at once (WASMRUN_WORKERS; default the number of CPUs, with --image data or auto"
        " no more than fit in three quarters of the available memory at ~768 MiB each)",
    )
    parser.add_argument(
        "--secrets-file", type=Path, metavar="FILE",
        help='TOML file of NAME = "value" secrets (WASMRUN_SECRETS_FILE; default none)',
    )
    parser.add_argument(
        "--policy-file", type=Path, metavar="FILE",
        help="TOML file of the operator's policy: secret grants and modes, network grants per skill"
        " and tenant, allowed hosts and origins (WASMRUN_POLICY_FILE; default none: no network)",
    )


class _Version(argparse.Action):
    """--version: worked out only when asked (it looks for the guest)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        from wasmrun.cli.doctor import version_line

        print(version_line())
        parser.exit()


_command = cli_help.command


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wasmrun", description="A Skills Protocol runtime: untrusted Python in CPython-on-WASI under wasmtime.",
        epilog=cli_help.example("wasmrun serve", "wasmrun run hello.py --arg name=Ada", "wasmrun COMMAND --help"),
        formatter_class=cli_help.Formatter,
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(commands)
    migrate = _command(
        commands, "migrate", "bring the shared database's schema up to date (servers also do it at start)",
        "wasmrun migrate --database-url postgresql://wasmrun@db/wasmrun",
    )
    _database_url(migrate)
    mcp = _command(
        commands, "mcp", "serve the Skills Protocol tools over MCP on stdin/stdout (needs pip install 'wasmrun[mcp]')",
        "wasmrun mcp --skills-dir ./my-skills",
    )
    _common(mcp)
    _policy_and_secrets(mcp)
    _image_option(mcp)
    mcp.add_argument("--with-create-skill", action="store_true", help="offer the create_skill tool too (default off)")
    _skills_parser(commands)
    tools = _command(
        commands, "tools", "print the LLM tool definitions as one JSON array", "wasmrun tools --format openai --strict"
    )
    tools.add_argument("--format", choices=FORMATS, default="jsonschema", help="tool format")
    tools.add_argument(
        "--strict", action="store_true",
        help="OpenAI strict mode where a tool's schema allows it (openai format only; default off)",
    )
    tools.add_argument("--with-create-skill", action="store_true", help="add the optional create_skill tool (default off)")
    _tenants_parser(commands)
    _common(run.add_parser(commands))
    sessions.add_parser(commands)
    bench.add_parser(commands)
    packages.add_parser(commands)
    images.add_parser(commands)
    cache.add_parser(commands)
    _command(
        commands, "warm", "compile the guest to machine code now and cache it, e.g. while building an image"
        " (else the first start does it, about 10-30 s)", "wasmrun warm",
    )
    doctor = _command(
        commands, "doctor", "show versions, caches, free disk and missing extras; exits 1 if something is wrong",
        "wasmrun doctor --data-dir /srv/wasmrun",
    )
    doctor.add_argument("--data-dir", type=Path, metavar="DIR", help=DATA_DIR_HELP)
    return parser


def _serve_parser(commands: Any) -> None:
    serve = _command(
        commands, "serve", "serve the Skills Protocol (JSON-RPC at /rpc, MCP at /mcp, the playground at /)",
        "wasmrun serve --port 8080 --skills-dir ./my-skills",
    )
    serve.add_argument("--host", help="address to listen on (WASMRUN_HOST; default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (WASMRUN_PORT; default 8080)")
    _common(serve)
    _policy_and_secrets(serve)
    _image_option(serve)
    serve.add_argument(
        "--audit-log", metavar="PATH",
        help='where to append the audit log, JSON lines (WASMRUN_AUDIT_LOG; default <data-dir>/audit.log; "-": none)',
    )
    serve.add_argument(
        "--blob-ttl", type=int, metavar="SECONDS",
        help="delete blobs this long after they were written (WASMRUN_BLOB_TTL; default 0: kept; per tenant: blob_ttl_s)",
    )
    serve.add_argument(
        "--insecure", action="store_true", default=None,
        help="serve a non-loopback --host with no tenants configured: anyone who reaches the port"
        " can run code (WASMRUN_INSECURE=1; default off)",
    )
    serve.add_argument(
        "--allow-one-worker", action="store_true", default=None,
        help="serve several tenants with fewer than 2 workers: one tenant's runs can then hold the only"
        " sandbox, and every other tenant's run is 'server busy' meanwhile (WASMRUN_ALLOW_ONE_WORKER=1; default off)",
    )
    serve.add_argument(
        "--with-create-skill", action="store_true", help="offer the create_skill tool at /mcp too (default off)"
    )
    packages.add_serve_flags(serve)
    _database_url(serve)
    serve.add_argument(
        "--blob-store", metavar="URL",
        help="s3://BUCKET?endpoint=URL&region=R: blob bytes shared by several servers, with --database-url;"
        " credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (WASMRUN_BLOB_STORE; default none: files)",
    )


def _skills_parser(commands: Any) -> None:
    skills = _command(commands, "skills", "list, check or add skills", "wasmrun skills check ./my-skills")
    skill_commands = skills.add_subparsers(dest="skills_command", required=True, metavar="SUBCOMMAND")
    listing = _command(skill_commands, "list", "list the skills the server would load", "wasmrun skills list")
    _common(listing)
    check = _command(
        skill_commands, "check", "say what is wrong with each skill under DIR (exits 1 if one is invalid)",
        "wasmrun skills check ./my-skills ./more-skills",
    )
    check.add_argument("dirs", type=Path, nargs="+", metavar="DIR", help="a skill folder or a folder of skills")
    skill_add = _command(
        skill_commands, "add", "copy a skill folder (an Agent Skill or one with a skill.toml) into <data-dir>/skills",
        "wasmrun skills add ./my-skills/report",
    )
    skill_add.add_argument("path", type=Path, metavar="PATH", help="the skill's folder")
    skill_add.add_argument("--data-dir", type=Path, metavar="DIR", help=DATA_DIR_HELP)


def _tenants_parser(commands: Any) -> None:
    limits_text = cli_help.tenant_limits_table()
    tenants = _command(
        commands, "tenants", "API keys and limits of the teams sharing this server",
        "wasmrun tenants add team-a --limit concurrent_runs=2", more=limits_text,
    )
    tenant_commands = tenants.add_subparsers(dest="tenants_command", required=True, metavar="SUBCOMMAND")
    add = _command(
        tenant_commands, "add", "add a tenant; prints its API key once, alone on stdout",
        "KEY=$(wasmrun tenants add team-a --limit max_memory_mb=512)", more=limits_text,
    )
    add.add_argument("name", help="the tenant's name")
    cli_limits.add_tenant_limit_option(add, required=False)
    listing = _command(
        tenant_commands, "list", "list the tenants, their key count and limit overrides", "wasmrun tenants list"
    )
    rotate = _command(
        tenant_commands, "rotate", "print a second key for NAME; the old one stays valid until revoke --old",
        "wasmrun tenants rotate team-a",
    )
    rotate.add_argument("name", help="the tenant's name")
    revoke = _command(
        tenant_commands, "revoke", "revoke NAME's keys (the server refuses them on the next call)",
        "wasmrun tenants revoke team-a --old",
    )
    revoke.add_argument("name", help="the tenant's name")
    revoke.add_argument("--old", action="store_true", help="revoke all but the newest key (ends a rotation; default off)")
    set_ = _command(
        tenant_commands, "set", "change NAME's limits (the others keep their values)",
        "wasmrun tenants set team-a --limit runs_per_minute=60 --limit blob_bytes=104857600", more=limits_text,
    )
    set_.add_argument("name", help="the tenant's name")
    cli_limits.add_tenant_limit_option(set_, required=True)
    for sub in (add, rotate, revoke, set_, listing):
        sub.add_argument("--data-dir", type=Path, metavar="DIR", help=DATA_DIR_HELP)
        _database_url(sub)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "run":
            return run.main(args)
        if args.command == "tools":
            return _tools(args)
        if args.command == "mcp":
            return _mcp(args)
        if args.command == "tenants":
            return _tenants(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "warm":
            return _warm()
        if args.command == "doctor":
            return _doctor(args)
        if args.command in ("session", "exec"):
            return sessions.main(args)
        if args.command == "bench":
            return bench.run(args)
        if args.command == "images":
            return images.main(args)
        if args.command == "cache":
            return cache.main(args)
        if args.command == "packages":
            return packages.main(args, Settings.load(data_dir=args.data_dir).data_dir)
        if args.skills_command == "list":
            return _skills_list(args)
        if args.skills_command == "add":
            return _skills_add(args)
        return _skills_check(args)
    except (ValueError, OSError, DatabaseError) as exc:
        print(f"wasmrun: {exc}", file=sys.stderr)
        return 2


def _image_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--image", choices=("auto", "stdlib", "data"),
        help="the guest image runs start from (WASMRUN_IMAGE; data: numpy, pandas, matplotlib; auto: data when it"
        " is built, else stdlib; default auto)",
    )


def _settings(args: argparse.Namespace, **extra: Any) -> Settings:
    return Settings.load(data_dir=args.data_dir, skills_dirs=args.skills_dir, **extra)


def _serve(args: argparse.Namespace) -> int:
    from wasmrun.server import serve

    serve(
        _settings(
            args, host=args.host, port=args.port, workers=args.workers, secrets_file=args.secrets_file,
            policy_file=args.policy_file, insecure=args.insecure, audit_log=args.audit_log, blob_ttl=args.blob_ttl,
            database_url=args.database_url, blob_store=args.blob_store, allow_one_worker=args.allow_one_worker,
            image=args.image, packages=args.packages, packages_allow=args.packages_allow,
        ),
        mcp_with_create_skill=args.with_create_skill,
    )
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from wasmrun.backends import migrate_database
    from wasmrun.database.migrations import LATEST

    settings = Settings.load(database_url=args.database_url)
    if settings.database_url is None:
        raise ValueError("migrate needs --database-url (or WASMRUN_DATABASE_URL): the local files need no migration")
    done = migrate_database(settings.database_url)
    print(f"schema at version {LATEST}" + (f" (applied {', '.join(map(str, done))})" if done else " (up to date)"))
    return 0


def _mcp(args: argparse.Namespace) -> int:
    import logging

    try:
        import mcp  # noqa: F401
    except ImportError:
        print("wasmrun: `wasmrun mcp` needs the MCP SDK: pip install 'wasmrun[mcp]'", file=sys.stderr)
        return 2
    from wasmrun.server import serve_mcp_stdio

    # stdout carries the MCP messages: logs go to stderr.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    settings = _settings(
        args, workers=args.workers, secrets_file=args.secrets_file, policy_file=args.policy_file, image=args.image
    )
    asyncio.run(serve_mcp_stdio(settings, with_create_skill=args.with_create_skill))
    return 0


def _warm() -> int:
    from wasmrun.sandbox import precompile

    print(f"compiled module ready: {precompile()}")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from wasmrun.cli.doctor import diagnose

    diagnosis = diagnose(Settings.load(data_dir=args.data_dir))
    print(diagnosis.render())
    return 1 if diagnosis.problems else 0


def _tenants(args: argparse.Namespace) -> int:
    from wasmrun.backends import open_backends

    settings = Settings.load(data_dir=args.data_dir, database_url=args.database_url)
    store = open_backends(settings).records.tenant_store()
    command = args.tenants_command
    if command == "list":
        doc = store.load()
        print(f"{'NAME':<20}  KEYS  LIMITS")
        for record in doc.tenants.values():
            shown = ", ".join(f"{k}={v}" for k, v in sorted(record.limits.items())) or "(server defaults)"
            print(f"{record.name:<20}  {len(record.keys):>4}  {shown}")
        return 0
    limits = cli_limits.tenant_limits(args)
    if command in ("add", "rotate"):
        new_key = store.add(args.name, limits) if command == "add" else store.rotate(args.name)
        # The key alone on stdout, so that a script can capture it; the rest on stderr.
        print(new_key)
        what = "added tenant" if command == "add" else "second key for"
        print(f"{what} {args.name!r}: the key above is shown only this once; store it now", file=sys.stderr)
        return 0
    if command == "revoke":
        n = store.revoke(args.name, old_only=args.old)
        print(f"revoked {n} key{'s' if n != 1 else ''} of {args.name!r}", file=sys.stderr)
        return 0
    store.set_limits(args.name, limits)
    print(f"limits of {args.name!r} updated", file=sys.stderr)
    return 0


def _skills_list(args: argparse.Namespace) -> int:
    from wasmrun.server import skills_served

    registry = skills_served(_settings(args))
    rows = [(s.owner or "-", s.name, s.version, s.manifest.kind, s.manifest.description) for s in registry.every_skill()]
    heads = ("OWNER", "NAME", "VERSION", "KIND")
    width = [max([len(r[i]) for r in rows] + [len(h)]) for i, h in enumerate(heads)]
    print("  ".join(f"{h:<{w}}" for h, w in zip(heads, width, strict=True)) + "  DESCRIPTION")
    for row in rows:
        print("  ".join(f"{v:<{w}}" for v, w in zip(row[:4], width, strict=True)) + f"  {row[4]}")
    return 0


def _skills_check(args: argparse.Namespace) -> int:
    from wasmrun.registry.folders import check_folder

    bad = 0
    for top in args.dirs:
        if not top.is_dir():
            print(f"{top}: not a folder")
            bad += 1
            continue
        report = check_folder(top)
        if not report:
            print(f"{top}: no skills (no folder holds a skill.toml, or a SKILL.md for an Agent Skill)")
        for folder, problems, warnings in report:
            if problems:
                bad += 1
                print(f"INVALID  {folder}")
                for problem in problems:
                    print(f"         - {problem}")
            else:
                print(f"ok       {folder}" + (" (served, with warnings)" if warnings else ""))
            for warning in warnings:
                print(f"         warning: {warning}")
    return 1 if bad else 0


def _tools(args: argparse.Namespace) -> int:
    from wasmrun.capabilities import facts_of
    from wasmrun.imagefacts import image_facts
    from wasmrun.server import serving_now
    from wasmrun.tools import render_all

    # As `serve` with these settings would state them now: its limits, network and image.
    settings = Settings.load()
    image = image_facts(serving_now(settings.image), settings.package_layers)
    facts = facts_of(settings.limits, settings.egress.network.run_code, image)
    rendered = render_all(args.format, strict=args.strict, with_create_skill=args.with_create_skill, facts=facts)
    print(json.dumps(rendered, indent=2))
    return 0


def _skills_add(args: argparse.Namespace) -> int:
    from wasmrun.registry.errors import SkillAlreadyExists
    from wasmrun.registry.folders import SkillProblems
    from wasmrun.server import skills_served

    settings = Settings.load(data_dir=args.data_dir)
    registry = skills_served(settings)
    try:
        skill, dest = registry.add(args.path, settings.installed_skills)
    except SkillProblems as exc:
        print(f"INVALID  {args.path}")
        for problem in exc.problems:
            print(f"         - {problem}")
        return 1
    except SkillAlreadyExists as exc:
        print(f"wasmrun: {exc.message}", file=sys.stderr)
        return 1
    print(f"added {skill.name} {skill.version} to {dest}")
    return 0
