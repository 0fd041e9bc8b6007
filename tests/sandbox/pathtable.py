"""A table of path operations, run natively and in the sandbox (test_path_semantics.py).

Each case runs in a fresh folder holding the same small tree: a folder `d`
(with `d/sub` and the file `d/g`), a file `f`, symbolic links to each (`ld`,
`lf`) and a dangling one (`lx`). The case's answer is the call's result (or
its errno's name) and the tree afterwards, with the case folder's own path
written as `<root>` so native and sandbox answers compare equal.

This file is plain Python for both sides: the tests read it as source and run
`table(root)` in the guest and in the host's interpreter.
"""

import errno
import os
import shutil

# Spellings of the same few names: trailing and repeated slashes, `.` and `..`
# segments, paths through symbolic links, names that do not exist.
PATHS = (
    "d", "d/", "d//", "./d", "./d/", ".//d", "d/.", "d/./", "d/sub/..", "d/sub/../", "d/../d/",
    "f", "f/", "./f", "f/.", "d/../f", "d/sub/../../f", "d//g", "d/./g", "d/g/",
    "ld", "ld/", "lf", "lf/", "lx", "lx/", "nope", "nope/", "d/nope/", "../CASE/f", "../CASE/d/",
)


def _fixture():
    os.mkdir("d")
    os.mkdir("d/sub")
    with open("d/g", "w") as out:
        out.write("g")
    with open("f", "w") as out:
        out.write("f")
    os.symlink("d", "ld")
    os.symlink("f", "lf")
    os.symlink("nope", "lx")


def _open(path, flags):
    fd = os.open(path, flags, 0o644)
    os.close(fd)


def _write_new(path):
    with open(path, "x") as out:
        out.write("n")


OPERATIONS = {
    "stat": lambda p: os.stat(p).st_size if not os.path.isdir(p) else "dir",
    "lstat": lambda p: "link" if os.path.islink(p) else os.lstat(p).st_nlink > 0,
    "exists/isdir/isfile/islink": lambda p: (os.path.exists(p), os.path.isdir(p), os.path.isfile(p), os.path.islink(p)),
    "open-read": lambda p: _open(p, os.O_RDONLY),
    "open-dir": lambda p: _open(p, os.O_RDONLY | os.O_DIRECTORY),
    "open-write": lambda p: _open(p, os.O_WRONLY),
    "open-creat": lambda p: _open(p, os.O_WRONLY | os.O_CREAT),
    "open-excl": lambda p: _open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL),
    "write-new": _write_new,
    "mkdir": os.mkdir,
    "makedirs-exist-ok": lambda p: os.makedirs(p, exist_ok=True),
    "rmdir": os.rmdir,
    "unlink": os.unlink,
    "rmtree": shutil.rmtree,
    "rename-to-new": lambda p: os.rename(p, "new"),
    "rename-to-new/": lambda p: os.rename(p, "new/"),
    "rename-onto": lambda p: os.rename("d/sub", p),
    "replace-f-onto": lambda p: os.replace("f", p),
    "link-from": lambda p: os.link(p, "new"),
    "link-to": lambda p: os.link("f", p),
    "symlink-at": lambda p: os.symlink("f", p),
    "readlink": os.readlink,
    "utime": lambda p: os.utime(p, (1_000_000, 2_000_000)),
    "utime-nofollow": lambda p: os.utime(p, (1_000_000, 2_000_000), follow_symlinks=False),
    "chmod": lambda p: os.chmod(p, 0o755),
    "listdir": lambda p: sorted(os.listdir(p)),
    "scandir": lambda p: sorted((e.name, e.is_dir(), e.is_file(), e.is_symlink()) for e in os.scandir(p)),
    "chdir": lambda p: (os.chdir(p), os.getcwd())[1],
    "realpath": os.path.realpath,
    "abspath": os.path.abspath,
    "access": lambda p: os.access(p, os.R_OK),
}


def _tree(root):
    """The case folder afterwards: every entry, its kind, and a file's content."""
    entries = []
    for top, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(top, name)
            rel = os.path.relpath(path, root)
            if os.path.islink(path):
                entries.append((rel, "link", os.readlink(path)))
            elif os.path.isdir(path):
                entries.append((rel, "dir"))
            else:
                with open(path) as f:
                    entries.append((rel, "file", f.read()))
    return sorted(entries)


def _answer(value, root):
    if isinstance(value, str):
        return value.replace(root, "<root>")
    if isinstance(value, (tuple, list)):
        return [_answer(v, root) for v in value]
    return value


def run_case(base, index, op, path):
    """One operation on one path in a fresh folder under `base`: (answer, tree)."""
    name = f"c{index}"
    root = os.path.join(base, name)
    os.mkdir(root)
    os.chdir(root)
    try:
        _fixture()
        try:
            answer = ["ok", _answer(OPERATIONS[op](path.replace("CASE", name)), root)]
        except OSError as exc:
            answer = ["error", type(exc).__name__, errno.errorcode.get(exc.errno, exc.errno)]
    finally:
        os.chdir(base)
    tree = _tree(root)
    shutil.rmtree(root)  # the sandbox's workspace has a file quota
    return answer, tree


def table(base):
    """{"op path": [answer, tree]} for every operation on every path."""
    results = {}
    index = 0
    for op in OPERATIONS:
        for path in PATHS:
            answer, tree = run_case(base, index, op, path)
            results[f"{op} {path}"] = [answer, [list(e) for e in tree]]
            index += 1
    return results


def main(args):
    base = args["base"]
    os.makedirs(base, exist_ok=True)
    return table(base)
