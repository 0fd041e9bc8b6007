"""`plt.show()` in a sandbox: there is no screen, so each open figure is saved
as /workspace/figure-N.png and closed; the host returns the run's images
(PNG and SVG files it finds in /workspace) with the result. Installed on
the data image, where matplotlib is pre-imported with the Agg backend.
"""

import os

WORKSPACE = "/workspace"


def _next_free(n: int) -> tuple[int, str]:
    while True:
        path = f"{WORKSPACE}/figure-{n}.png"
        if not os.path.exists(path):
            return n, path
        n += 1


def show(*args, **kwargs) -> None:
    import matplotlib.pyplot as plt

    n = 1
    for num in plt.get_fignums():
        n, path = _next_free(n)
        plt.figure(num).savefig(path, format="png")
        n += 1
    plt.close("all")


def install() -> None:
    import matplotlib.pyplot as plt

    plt.show = show
