"""Directory trees of any depth: wasmrun/dirtree.py (a leaf the guest build uses
too), under the name the sandbox's modules import."""

from wasmrun.dirtree import TreeChanged, empty, measure, remove, stamp_files, walk

__all__ = ["TreeChanged", "empty", "measure", "remove", "stamp_files", "walk"]
