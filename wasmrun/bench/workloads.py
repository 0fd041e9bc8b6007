"""The compute workloads: pure Python, timed inside the interpreter that runs them.

The first seven are the issue's table (#23); the last four are pyperformance-style
kernels (nbody, fannkuch, nqueens, richards-like method dispatch is covered by
`method calls`, so: spectral norm). Each is a setup (untimed) and a body (timed)
that use `N`, the size; `--quick` divides it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    setup: str
    body: str
    n: int  # the size of a full run (native: tens of milliseconds here)

    def source(self, scale: float) -> str:
        """The module: setup, then the timed body; ELAPSED holds its seconds."""
        n = max(1, int(self.n * scale))
        return (
            f"import time\nN = {n}\n{self.setup}\n_t0 = time.perf_counter()\n{self.body}\n"
            "ELAPSED = time.perf_counter() - _t0\n"
        )

    def untimed(self, scale: float) -> str:
        """The same work without the clock (for peers that have no `time` module)."""
        return f"N = {max(1, int(self.n * scale))}\n{self.setup}\n{self.body}\n"


COMPUTE: tuple[Workload, ...] = (
    Workload("sum over a generator", "", "total = sum(i * i for i in range(N))", 600_000),
    Workload(
        "dict-heavy loop", "",
        "d = {}\nfor i in range(N):\n    k = i % 1000\n    d[k] = d.get(k, 0) + i\n"
        "hits = 0\nfor i in range(N):\n    if (i % 1500) in d:\n        hits += 1",
        150_000,
    ),
    Workload("for loop arithmetic", "", "s = 0\nfor i in range(N):\n    s += i * i % 7 - (i >> 3)", 200_000),
    Workload(
        "method calls on small classes",
        "class P:\n    __slots__ = ('x', 'y')\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n"
        "    def add(self, o):\n        return P(self.x + o.x, self.y + o.y)\n    def norm1(self):\n"
        "        return abs(self.x) + abs(self.y)\n",
        "p = P(0, 0)\nstep = P(1, -2)\nacc = 0\nfor _ in range(N):\n    p = p.add(step)\n    acc += p.norm1()",
        120_000,
    ),
    Workload(
        "json dumps/loads",
        "import json\nDOC = [{'id': i, 'name': f'item{i}', 'tags': ['a', 'b'], 'v': i / 3} for i in range(200)]",
        "for _ in range(N):\n    json.loads(json.dumps(DOC))", 60,
    ),
    Workload(
        "string building", "",
        "parts = []\nfor i in range(N):\n    parts.append(f'{i}:{i * 2};')\ns = ''.join(parts)\n"
        "u = s.upper().replace(';', ',').split(',')",
        150_000,
    ),
    Workload(
        "regex",
        "import re\nTEXT = 'alpha beta-12 gamma 3.5 delta_x 77 ' * 200\nWORD = re.compile(r'[a-z]+|[0-9]+(?:\\.[0-9]+)?')",
        "for _ in range(N):\n    found = WORD.findall(TEXT)\n    re.sub(r'\\d+', '#', TEXT)", 60,
    ),
    Workload(
        "nbody (floats)",
        "def advance(bodies, dt, n):\n    for _ in range(n):\n        for i, (p1, v1, m1) in enumerate(bodies):\n"
        "            for p2, v2, m2 in bodies[i + 1:]:\n"
        "                dx = p1[0] - p2[0]; dy = p1[1] - p2[1]; dz = p1[2] - p2[2]\n"
        "                mag = dt * ((dx * dx + dy * dy + dz * dz) ** -1.5)\n"
        "                b1 = m1 * mag; b2 = m2 * mag\n"
        "                v1[0] -= dx * b2; v1[1] -= dy * b2; v1[2] -= dz * b2\n"
        "                v2[0] += dx * b1; v2[1] += dy * b1; v2[2] += dz * b1\n"
        "        for p, v, m in bodies:\n            p[0] += dt * v[0]; p[1] += dt * v[1]; p[2] += dt * v[2]\n"
        "BODIES = [([float(i), i * 0.5, -i * 0.25], [0.01 * i, 0.0, 0.02], 1.0 + i) for i in range(5)]\n",
        "advance(BODIES, 0.01, N)", 6_000,
    ),
    Workload(
        "fannkuch",
        "def fannkuch(n):\n    perm1 = list(range(n))\n    count = [0] * n\n    max_flips = 0\n    r = n\n"
        "    while True:\n        while r != 1:\n            count[r - 1] = r\n            r -= 1\n"
        "        perm = perm1[:]\n        flips = 0\n        k = perm[0]\n        while k:\n"
        "            perm[:k + 1] = perm[k::-1]\n            flips += 1\n            k = perm[0]\n"
        "        max_flips = max(max_flips, flips)\n        while r != n:\n            perm1.insert(r, perm1.pop(0))\n"
        "            count[r] -= 1\n            if count[r] > 0:\n                break\n            r += 1\n"
        "        else:\n            return max_flips\n",
        "for _ in range(N):\n    fannkuch(7)", 6,
    ),
    Workload(
        "nqueens (generators)",
        "def permutations(iterable):\n    pool = tuple(iterable)\n    n = len(pool)\n    indices = list(range(n))\n"
        "    cycles = list(range(n, 0, -1))\n    yield tuple(pool[i] for i in indices)\n"
        "    while n:\n        for i in reversed(range(n)):\n            cycles[i] -= 1\n            if cycles[i] == 0:\n"
        "                indices[i:] = indices[i + 1:] + indices[i:i + 1]\n                cycles[i] = n - i\n"
        "            else:\n                j = cycles[i]\n                indices[i], indices[-j] = indices[-j], indices[i]\n"
        "                yield tuple(pool[i] for i in indices)\n                break\n        else:\n            return\n"
        "def queens(n):\n    cols = range(n)\n    return [v for v in permutations(cols)\n"
        "            if n == len(set(v[i] + i for i in cols)) == len(set(v[i] - i for i in cols))]\n",
        "for _ in range(N):\n    queens(6)", 20,
    ),
    Workload(
        "spectral norm",
        "def a(i, j):\n    return 1.0 / ((i + j) * (i + j + 1) // 2 + i + 1)\n"
        "def av(x, n):\n    return [sum(a(i, j) * x[j] for j in range(n)) for i in range(n)]\n"
        "def atv(x, n):\n    return [sum(a(j, i) * x[j] for j in range(n)) for i in range(n)]\n",
        "u = [1.0] * 60\nfor _ in range(N):\n    v = atv(av(u, 60), 60)\n    u = atv(av(v, 60), 60)", 12,
    ),
)
