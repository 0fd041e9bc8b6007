"""scripts/check_architecture.py loaded as a module, for the tests of its rules (it is a
script of the checkout, not part of the package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_architecture", ROOT / "scripts/check_architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is made
    spec.loader.exec_module(module)
    return module


checker = _load()
