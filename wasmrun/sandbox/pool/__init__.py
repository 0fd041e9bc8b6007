"""Runs off the event loop: the bounded executor, the pool of worker processes (one engine each),
and the executor that serves the stdlib image while the data image is made."""
