"""What the doors for other products' clients (wasmrun/e2b/, wasmrun/jupyter/, wasmrun/azure/)
share, written once: a request's key read in the forms a door accepts and its tenant
resolved (callers.py), the 429 of a tenant's `concurrent_requests` (admission.py), a client's
file path checked against the session's folder (paths.py), a notebook cell split into runs and
`!` commands (cells.py). Each returns or raises a typed outcome; each door answers it in its
own protocol's shape. Nothing here imports a door."""
