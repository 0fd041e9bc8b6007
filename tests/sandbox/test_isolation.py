"""Two runs share nothing: each is a fresh instance of the snapshot."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("first", "second"),
    [
        pytest.param(
            "import json\ndef main(args):\n    json.leak = 'x'\n    return 'set'",
            "import json\ndef main(args):\n    return getattr(json, 'leak', None)",
            id="module-globals",
        ),
        pytest.param(
            "import builtins\ndef main(args):\n    builtins.len = lambda x: 42\n    return 'patched'",
            "def main(args):\n    return len([1, 2])",
            id="builtins-monkeypatch",
        ),
        pytest.param(
            "def main(args):\n    open('/workspace/left.txt', 'w').write('x')\n    return 'written'",
            "import os\ndef main(args):\n    return os.listdir('/workspace')",
            id="workspace-files",
        ),
        pytest.param(
            "import sys\ndef main(args):\n    sys.modules['evil'] = sys\n    sys.path.append('/evil')\n    return 'set'",
            "import sys\ndef main(args):\n    return ['evil' in sys.modules, '/evil' in sys.path]",
            id="sys-modules-and-path",
        ),
        pytest.param(
            "import os\ndef main(args):\n    os.environ['LEAK'] = '1'\n    return 'set'",
            "import os\ndef main(args):\n    return os.environ.get('LEAK')",
            id="environment",
        ),
    ],
)
def test_state_does_not_leak(run_code, first, second):
    baseline = run_code(second).output
    assert run_code(first).status == "completed"
    assert run_code(second).output == baseline


def test_random_state_differs_between_runs(run_code):
    code = "import random, os\ndef main(args):\n    return [random.random(), random.getrandbits(64), os.urandom(8).hex()]"
    outputs = [tuple(run_code(code).output) for _ in range(5)]
    assert len(set(o[0] for o in outputs)) == 5
    assert len(set(o[1] for o in outputs)) == 5
    assert len(set(o[2] for o in outputs)) == 5


def test_uuid4_differs_between_runs(run_code):
    code = "import uuid\ndef main(args):\n    return str(uuid.uuid4())"
    assert len({run_code(code).output for _ in range(3)}) == 3


def test_a_failed_run_does_not_poison_the_next(run_code):
    run_code("import sys\ndef main(args):\n    sys.stdout.close()\n    raise ValueError('x')")
    assert run_code("def main(args):\n    print('fine')\n    return 1").logs == "fine\n"
