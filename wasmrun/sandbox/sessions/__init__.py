"""Sessions: a run inside a session (the worker's half), a session's state and pages on disk, its warm instances."""
