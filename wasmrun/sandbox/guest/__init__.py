"""The guest boundary: its memory, the request it reads and the reply it gives, the host calls and
the data image's door, the WASI calls the host checks, captured and streamed output, displays,
JSON text, and every use of wasmtime-py's private API."""
