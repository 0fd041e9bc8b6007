"""A Jupyter Kernel Gateway front (docs/jupyter.md): `/api/kernels` and the kernel's
`/api/kernels/{id}/channels` WebSocket (Jupyter messaging v5.3, JSON text frames), so
Jupyter clients (AutoGen's and AG2's Jupyter executors, nbclient through a gateway)
run their cells in wasmrun. One kernel is one wasmrun session of the tenant whose key
made it; every call goes through the protocol's Dispatcher as that tenant (the E2B
door's Front, wasmrun/e2b/calls.py), so quotas, limits, audit and metrics apply."""
