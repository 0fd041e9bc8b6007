"""The command line: `wasmrun` and its commands."""
