#!/usr/bin/env python3
"""Where pure-Python compute time goes in the sandbox, against native CPython.

    .venv/bin/python scripts/profile_guest.py profile [WORKLOAD ...] [--image data] [--seconds 3]
    .venv/bin/python scripts/profile_guest.py ab [--variants default,no_epoch] [--rounds 7]
    .venv/bin/python scripts/profile_guest.py list

`profile` samples one workload at a time with Linux `perf` (cpu-clock, 4 kHz)
in the guest and in native `python3`, and prints the top C functions of each
by self and inclusive share of samples. wasmtime writes /tmp/perf-PID.map for
the code it compiles (Config.profiler = "perfmap"), so the guest's samples
carry CPython's own function names from the module's name section. The guest
keeps frame pointers (wasmtime's code always has them), so its inclusive
shares are whole; native CPython is built without them, so its call chains
come from DWARF unwinding (`--call-graph dwarf`) and only its self shares are
exact.

`ab` times every workload in native `python3` and in the sandbox under
several wasmtime code-generation settings, interleaved in one run (one round:
each workload on every runner in turn), and prints the median of each with
its ratio to native. Each runner is a long-lived process (the sandbox's
holds one engine) timing `work()` inside the run, so instance start-up is
not counted. A variant compiles the guest once (about 10 s; cached in the
compiled-module cache under the variant's settings).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The workloads (#23), each a `work()` of about 50-150 ms natively.
WORKLOADS: dict[str, str] = {
    "genexpr_sum": "def work():\n    return sum(i * i for i in range(400_000))\n",
    # The same shape with a sum that stays below 2**31: the guest's C `long` is
    # 32 bits, and sum()'s fast path adds in a C long (docs/compute-profile.md).
    "genexpr_sum_small": "def work():\n    return sum(i & 1023 for i in range(400_000))\n",
    "dict_loop": (
        "def work():\n"
        "    d = {}\n"
        "    for i in range(120_000):\n"
        "        k = 'k' + str(i % 5000)\n"
        "        d[k] = d.get(k, 0) + i\n"
        "    return len(d)\n"
    ),
    "for_arith": (
        "def work():\n"
        "    t = 0\n"
        "    for i in range(600_000):\n"
        "        t += (i * 3 + 1) % 7\n"
        "    return t\n"
    ),
    "method_calls": (
        "class P:\n"
        "    __slots__ = ('x', 'y')\n"
        "    def __init__(self, x, y):\n"
        "        self.x = x; self.y = y\n"
        "    def norm1(self):\n"
        "        return abs(self.x) + abs(self.y)\n"
        "    def add(self, o):\n"
        "        return P(self.x + o.x, self.y + o.y)\n"
        "def work():\n"
        "    p = P(0, 0); s = 0; one = P(1, -1)\n"
        "    for _ in range(150_000):\n"
        "        p = p.add(one); s += p.norm1()\n"
        "    return s\n"
    ),
    "json": (
        "import json\n"
        "DOC = [{'id': i, 'name': 'item%d' % i, 'tags': ['a', 'b'], 'score': i * 0.5} for i in range(2000)]\n"
        "def work():\n"
        "    n = 0\n"
        "    for _ in range(12):\n"
        "        n += len(json.loads(json.dumps(DOC)))\n"
        "    return n\n"
    ),
    "string_build": (
        "def work():\n"
        "    parts = []\n"
        "    for i in range(150_000):\n"
        "        parts.append(f'{i}:{i % 7}')\n"
        "    s = ','.join(parts)\n"
        "    return len(s.upper().split(','))\n"
    ),
    "regex": (
        "import re\n"
        "TEXT = ' '.join('word%d foo@example.com 12-34-56 bar' % i for i in range(3000))\n"
        "PAT = re.compile(r'[\\w.]+@[\\w.]+|\\d+-\\d+-\\d+')\n"
        "def work():\n"
        "    n = 0\n"
        "    for _ in range(6):\n"
        "        n += len(PAT.findall(TEXT))\n"
        "    return n\n"
    ),
}

# The body run by every runner: `main(args)` times `work()` (or repeats it for
# `args["seconds"]` when profiled) and returns seconds per call.
TIMING = (
    "import time as _t\n"
    "def main(args):\n"
    "    work()\n"  # a first call: imports, caches and the allocator's arenas settle
    "    end = _t.perf_counter() + args.get('seconds', 0)\n"
    "    n = 0; t0 = _t.perf_counter()\n"
    "    while True:\n"
    "        work(); n += 1\n"
    "        if _t.perf_counter() >= end:\n"
    "            return (_t.perf_counter() - t0) / n\n"
)

# A native runner: reads `NAME SECONDS` lines, prints seconds per call.
NATIVE_RUNNER = (
    "import json, sys\n"
    "W = json.loads(sys.argv[1])\n"
    "print('ready', flush=True)\n"
    "for line in sys.stdin:\n"
    "    name, seconds = line.split()\n"
    "    g = {}\n"
    "    exec(W[name], g)\n"
    "    print(g['main']({'seconds': float(seconds)}), flush=True)\n"
)

# wasmtime code-generation settings tried by `ab`: name -> (what it is, settings).
# "epoch": epoch interruption (every limit depends on it); "opt": Cranelift's
# opt level; "flags": Cranelift settings; "pool": the product's pooling allocator.
Variant = dict[str, Any]
VARIANTS: dict[str, tuple[str, Variant]] = {
    "default": ("the product's engine (epoch checks, opt=speed, pooling)", {}),
    "no_epoch": ("epoch interruption off (no limit would hold)", {"epoch": False}),
    "speed_and_size": ("cranelift_opt_level=speed_and_size", {"opt": "speed_and_size"}),
    "no_spectre": (
        "Spectre mitigations off for heap and table accesses",
        {"flags": {"enable_heap_access_spectre_mitigation": "false", "enable_table_access_spectre_mitigation": "false"}},
    ),
    "no_pool": ("on-demand instance allocator (no pooling)", {"pool": False}),
}


# -- the sandbox runner (a child process) ---------------------------------------

def _config_for(variant: Variant, base: Callable[[], Any]) -> Callable[[], Any]:
    """`base` (an engine-config maker) with `variant`'s settings applied."""
    import wasmtime

    from wasmrun.sandbox.guest import wasmtime_internals

    def make() -> wasmtime.Config:
        config: wasmtime.Config = base() if variant.get("pool", True) else wasmtime.Config()
        if not variant.get("pool", True):
            config.epoch_interruption = True
            wasmtime_internals.set_async_stack_size(config, (4 << 20) + (1 << 20))
            config.max_wasm_stack = 4 << 20
        if "epoch" in variant:
            config.epoch_interruption = variant["epoch"]
        if "opt" in variant:
            config.cranelift_opt_level = variant["opt"]
        for flag, value in variant.get("flags", {}).items():
            config.cranelift_flag_set(flag, value)
        if variant.get("perfmap"):
            config.profiler = "perfmap"
        return config

    return make


def _engine(image: str, variant: Variant, tmp: Path) -> Any:
    """A SandboxEngine for `image` whose wasmtime engine has `variant`'s settings.
    The image modules' config makers and cache keys are replaced for this
    process only (a runner is a process of its own)."""
    from wasmrun.blobs.store import FileBlobStore
    from wasmrun.sandbox import SandboxEngine, make_engine
    from wasmrun.sandbox.images import dataimage, stdlibimage

    codegen = {k: v for k, v in variant.items() if k not in ("perfmap", "guest")}  # the profiler changes no code
    suffix = ";variant=" + json.dumps(codegen, sort_keys=True) if codegen else ""
    if image == "data":
        import wasmtime

        make_data = _config_for({**variant, "pool": False}, wasmtime.Config)  # the data engine has no pool
        dataimage.data_engine = lambda: wasmtime.Engine(make_data())
        dataimage.DATA_ENGINE_SETTINGS += suffix
        return make_engine("data", FileBlobStore(tmp))
    stdlibimage.engine_config = _config_for(variant, stdlibimage.engine_config)
    stdlibimage.ENGINE_SETTINGS += suffix
    guest = None
    if "guest" in variant:  # another build of the guest (its compiled form is cached by its own hash)
        from python_wasm.build import Guest

        folder = Path(variant["guest"])
        guest = Guest(folder.name, folder / "lib", folder / "python.wasm", folder / "snapshot.wasm")
    return SandboxEngine(FileBlobStore(tmp), guest=guest)


def run_sandbox_runner(image: str, variant: Variant) -> None:
    """Serve `NAME SECONDS` lines on stdin with the sandbox, as NATIVE_RUNNER does natively."""
    from wasmrun.sandbox import CEILING_LIMITS, RunRequest, encode_args

    with tempfile.TemporaryDirectory() as tmp, _engine(image, variant, Path(tmp)) as engine:
        print("ready", flush=True)
        for line in sys.stdin:
            name, seconds = line.split()
            request = RunRequest(
                kind="code", code=WORKLOADS[name] + TIMING, limits=CEILING_LIMITS,
                args_json=encode_args({"seconds": float(seconds)}),
            )
            result = engine.run(request)
            if result.status != "completed":
                raise SystemExit(f"{name}: {result.error}")
            print(result.output, flush=True)


# -- runners as seen from the parent ---------------------------------------------

class Runner:
    """A runner process: native python3 or the sandbox with one variant."""

    def __init__(self, label: str, argv: list[str]) -> None:
        self.label = label
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
        self._expect("ready")

    def _expect(self, what: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != what:
            raise SystemExit(f"{self.label}: expected {what!r}, got {line!r} (exit {self.proc.poll()})")

    def time(self, name: str, seconds: float = 0.0) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{name} {seconds}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.label}: ended (exit {self.proc.wait()})")
        return float(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def native_runner(python: str) -> Runner:
    return Runner("native", [python, "-I", "-S", "-c", NATIVE_RUNNER, json.dumps({k: v + TIMING for k, v in WORKLOADS.items()})])


def sandbox_runner(image: str, name: str, variant: Variant) -> Runner:
    argv = [sys.executable, str(Path(__file__).resolve()), "runner", "--image", image, "--variant-json", json.dumps(variant)]
    return Runner(f"sandbox {image} {name}", argv)


# -- profile ------------------------------------------------------------------------

def _perf() -> str:
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("`perf` is not installed (Debian: apt-get install linux-perf)")
    return perf


def record(perf: str, runner: Runner, name: str, seconds: float, out: Path, call_graph: str) -> float:
    """Sample `runner`'s process with perf while it repeats `name` for `seconds`;
    returns the seconds one `work()` took meanwhile."""
    rec = subprocess.Popen(
        [perf, "record", "-q", "-F", "4000", "-e", "cpu-clock", "--call-graph", call_graph,
         "-p", str(runner.proc.pid), "-o", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)  # perf attaches
    per_call = runner.time(name, seconds)
    rec.send_signal(signal.SIGINT)
    rec.wait(timeout=120)
    return per_call


def _frame_name(sym: str) -> str:
    """`wasm[0]::function[123]::_PyEval_EvalFrameDefault` (a perfmap name) -> the C name."""
    return sym.rsplit("::", 1)[-1] if sym.startswith("wasm[") else sym


def samples(perf: str, data: Path, tid: int) -> Iterator[list[str]]:
    """Each sample of thread `tid` in `data` as its call chain of function names, innermost first."""
    text = subprocess.run(
        [perf, "script", "-i", str(data), "-F", "tid,ip,sym", "--no-inline"],
        capture_output=True, text=True, check=True,
    ).stdout
    for block in text.split("\n\n"):
        lines = [ln.strip() for ln in block.strip().splitlines()]
        if not lines or int(lines[0].split()[0]) != tid:
            continue
        chain = []
        for frame in lines[1:]:
            parts = frame.split(None, 1)
            sym = parts[1].rsplit(" (", 1)[0] if len(parts) > 1 else "[unknown]"
            chain.append(_frame_name(sym.split("+0x")[0]))
        yield chain or ["[unknown]"]


# Groups of functions whose time `profile` compares between the two sides (self time).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("eval loop", ("_PyEval_EvalFrameDefault",)),
    ("allocator", ("malloc", "free", "dlmalloc", "dlfree", "_PyObject_Malloc", "_PyObject_Free", "PyObject_Malloc",
                   "PyObject_Free", "_PyMem_RawMalloc", "_PyMem_RawFree", "PyMem_Malloc", "PyMem_Free",
                   "allocate_from_new_pool", "_int_malloc", "_int_free", "cfree", "PyObject_Realloc",
                   "_PyObject_Realloc", "dlrealloc", "realloc", "_PyMem_RawRealloc", "pymalloc_realloc")),
    ("memcpy, memcmp, memset", ("memcpy", "memmove", "memcmp", "memset", "compiler_rt.mem*", "__mem*")),
    ("kernel (page faults)", ("clear_page*", "exc_page_fault", "asm_exc_page_fault", "do_user_addr_fault")),
)  # a name ending in * is a prefix


def group_of(fn: str) -> str:
    for group, names in GROUPS:
        if any(fn == n or (n.endswith("*") and fn.startswith(n[:-1])) for n in names):
            return group
    return "everything else"


def group_table(chains: list[list[str]]) -> dict[str, float]:
    """Each group's share (0-1) of the samples, by the innermost frame."""
    counts = Counter(group_of(chain[0]) for chain in chains)
    return {group: counts[group] / (len(chains) or 1) for group in [*(g for g, _ in GROUPS), "everything else"]}


def table(chains: list[list[str]], top: int) -> list[tuple[str, float, float]]:
    """(function, self %, inclusive %) for the `top` functions by self share."""
    own = Counter(chain[0] for chain in chains)
    incl = Counter(fn for chain in chains for fn in set(chain))
    n = len(chains) or 1
    return [(fn, 100 * c / n, 100 * incl[fn] / n) for fn, c in own.most_common(top)]


def profile(opts: argparse.Namespace) -> dict[str, Any]:
    perf = _perf()
    names = opts.workloads or list(WORKLOADS)
    results: dict[str, Any] = {}
    native = native_runner(opts.python)
    variant: Variant = {"perfmap": True} | ({"guest": str(opts.guest)} if opts.guest else {})
    sandbox = sandbox_runner(opts.image, "default", variant)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in names:
                results[name] = {}
                for label, runner, call_graph in (("native", native, "dwarf,16384"), ("sandbox", sandbox, "fp")):
                    data = Path(tmp) / f"{name}-{label}.data"
                    per_call = record(perf, runner, name, opts.seconds, data, call_graph)
                    chains = list(samples(perf, data, runner.proc.pid))
                    results[name][label] = {"samples": len(chains), "ms_per_call": per_call * 1000,
                                            "top": table(chains, opts.top), "groups": group_table(chains)}
                print_profile(name, results[name])
    finally:
        native.close()
        sandbox.close()
    return results


def print_profile(name: str, result: dict[str, Any]) -> None:
    native, sandbox = result["native"], result["sandbox"]
    ratio = sandbox["ms_per_call"] / native["ms_per_call"]
    print(f"\n### {name}: {sandbox['ms_per_call']:.1f} ms against {native['ms_per_call']:.1f} ms native ({ratio:.2f}x)\n")
    for label in ("native", "sandbox"):
        part = result[label]
        print(f"{label} ({part['samples']} samples)\n\n| function | self % | inclusive % |\n|---|---:|---:|")
        for fn, own, incl in part["top"]:
            print(f"| {fn} | {own:.1f} | {incl:.1f} |")
        print()
    # Each group's time per call on both sides: where the extra time of the sandbox is.
    extra = sandbox["ms_per_call"] - native["ms_per_call"]
    print("| self time in | native ms | sandbox ms | times native | share of the extra time |\n|---|---:|---:|---:|---:|")
    for group in sandbox["groups"]:
        n = native["groups"][group] * native["ms_per_call"]
        w = sandbox["groups"][group] * sandbox["ms_per_call"]
        times = f"{w / n:.1f}x" if n > 0.005 else "-"
        share = f"{100 * (w - n) / extra:.0f}%" if extra > 0 else "-"
        print(f"| {group} | {n:.2f} | {w:.2f} | {times} | {share} |")
    print()


# -- A/B --------------------------------------------------------------------------------

def ab(opts: argparse.Namespace) -> dict[str, Any]:
    names = opts.workloads or list(WORKLOADS)
    variants = opts.variants.split(",")
    for spec in opts.guest:  # NAME=DIR: the product's engine on another build of the guest
        name, _, folder = spec.partition("=")
        VARIANTS[name] = (f"the product's engine on the guest built in {folder}", {"guest": folder})
        variants.append(name)
    runners = [native_runner(opts.python)]
    times: dict[tuple[str, str], list[float]] = {}
    try:
        for v in variants:  # one at a time: each may compile the guest first
            runners.append(sandbox_runner(opts.image, v, VARIANTS[v][1]))
        for _ in range(opts.rounds):
            order = runners[:]
            random.shuffle(order)  # no runner always follows the same one
            for name in names:
                for runner in order:
                    times.setdefault((runner.label, name), []).append(runner.time(name))
    finally:
        for runner in runners:
            runner.close()
    medians = {f"{label}|{name}": statistics.median(ts) for (label, name), ts in times.items()}
    print(f"\nmedian of {opts.rounds} interleaved rounds; ratio to native python3 ({opts.image} image)\n")
    print("| workload | native ms | " + " | ".join(variants) + " |")
    print("|---|---:|" + "---:|" * len(variants))
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    for name in names:
        base = medians[f"native|{name}"]
        cells = []
        for v, runner in zip(variants, runners[1:], strict=True):
            ratio = medians[f"{runner.label}|{name}"] / base
            ratios[v].append(ratio)
            cells.append(f"{ratio:.2f}x")
        print(f"| {name} | {base * 1000:.1f} | " + " | ".join(cells) + " |")
    print("| **median** | | " + " | ".join(f"**{statistics.median(r):.2f}x**" for r in ratios.values()) + " |")
    for v in variants:
        print(f"- {v}: {VARIANTS[v][0]}")
    return {"medians_s": medians, "variants": variants}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.split("\n")[1:]))
    sub = parser.add_subparsers(dest="command", required=True)
    for command in ("profile", "ab"):
        p = sub.add_parser(command)
        p.add_argument("workloads", nargs="*", metavar="WORKLOAD", help="some of: " + ", ".join(WORKLOADS))
        p.add_argument("--image", choices=("stdlib", "data"), default="stdlib")
        p.add_argument("--python", default=os.environ.get("NATIVE_PYTHON", "python3"), help="the native CPython")
        p.add_argument("--json", type=Path, help="also write the results here")
        if command == "profile":
            p.add_argument("--seconds", type=float, default=3.0, help="how long each workload is sampled")
            p.add_argument("--top", type=int, default=12)
            p.add_argument("--guest", type=Path, help="profile another build of the guest (a folder with lib/ and snapshot.wasm)")
        else:
            p.add_argument("--rounds", type=int, default=7)
            p.add_argument("--variants", default="default,no_epoch", help=", ".join(VARIANTS))
            p.add_argument("--guest", action="append", default=[], metavar="NAME=DIR",
                           help="also run another build of the guest (a folder with lib/ and snapshot.wasm)")
    runner = sub.add_parser("runner", help="(internal) a sandbox runner process")
    runner.add_argument("--image", default="stdlib")
    runner.add_argument("--variant-json", default="{}")
    sub.add_parser("list", help="the workloads and variants")
    opts = parser.parse_args()
    if opts.command == "runner":
        run_sandbox_runner(opts.image, json.loads(opts.variant_json))
        return 0
    unknown = set(getattr(opts, "workloads", [])) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))} (see `list`)")
    if opts.command == "list":
        for name, code in WORKLOADS.items():
            print(f"{name}:\n{code}")
        for name, (what, _) in VARIANTS.items():
            print(f"variant {name}: {what}")
        return 0
    results = profile(opts) if opts.command == "profile" else ab(opts)
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
