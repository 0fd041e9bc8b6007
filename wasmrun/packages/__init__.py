"""Operator-added pure-Python packages: a read-only layer every run mounts.

`wasmrun packages add NAME...` resolves wheels with pip (the host's, with the
operator's pip configuration), refuses native code, unpacks the wheels into a
fresh folder, compiles them to bytecode and publishes the folder in one
atomic step (layer.py). Servers on the same data dir mount the current layer
read-only at /packages in every run (sandbox/images/stdlibimage.py). The command itself is
wasmrun/cli/packages.py.
"""
