"""The guest images a run starts from: the Image seam, the stdlib image (CPython 3.11), the data image
(CPython 3.15 with numpy, pandas, matplotlib), its start and the figures its runs leave, the
compiled-module cache, and the images' names. An image knows nothing of the engine that runs it
(sandbox/engines.py builds that) nor of sessions. `python -m wasmrun.sandbox.images` makes the data image."""

DATA_IMAGE_MAKER = __name__  # `python -m` on this package makes the data image (__main__.py)
