"""The guest images a run starts from: the Image seam, the stdlib image (CPython 3.11), the data image
(CPython 3.15 with numpy, pandas, matplotlib) and its start, and the compiled-module cache.
`python -m wasmrun.sandbox.images` makes the data image."""

DATA_IMAGE_MAKER = __name__  # `python -m` on this package makes the data image (__main__.py)
