"""A run's basic contract: args in, JSON out, logs captured, errors typed."""

from __future__ import annotations

import pytest


def test_hello_world(run_code):
    result = run_code("def main(args):\n    print('hello, world')\n    return 'done'")
    assert result.status == "completed"
    assert result.output == "done"
    assert result.logs == "hello, world\n"
    assert result.run_id.startswith("run_")


def test_args_in_json_out(run_code):
    code = "def main(args):\n    return {'sum': sum(args['xs']), 'name': args['name'].upper(), 'none': None}"
    result = run_code(code, args={"xs": [1, 2, 3.5], "name": "ünï"})
    assert result.status == "completed"
    assert result.output == {"sum": 6.5, "name": "ÜNÏ", "none": None}


def test_usage_figures(run_code):
    result = run_code("def main(args):\n    return sum(range(10000))")
    usage = result.usage
    assert 0 < usage.cpu_ms <= usage.run_ms + 1  # one thread's CPU clock: within the run's wall time
    assert usage.peak_memory_bytes >= 16 << 20
    assert 0 < usage.instantiate_ms <= usage.total_ms
    assert 0 < usage.run_ms <= usage.total_ms


def test_stdout_stderr_and_log_in_order(run_code):
    code = (
        "import sys\nfrom runtime import log\n"
        "def main(args):\n"
        "    print('one')\n"
        "    log.info('two')\n"
        "    print('three', file=sys.stderr)\n"
        "    log.error('four')\n"
        "    print('five')\n"
    )
    result = run_code(code)
    assert result.logs == "one\n[INFO] two\nthree\n[ERROR] four\nfive\n"


def test_output_is_capped_keeping_head_and_tail(run_code):
    code = "def main(args):\n    for i in range(20000):\n        print('line', i)\n    return 'ok'"
    result = run_code(code, output_bytes=1000)
    assert result.status == "completed"
    assert result.logs.startswith("line 0\nline 1\n")
    assert result.logs.endswith("line 19999\n")
    assert "bytes of output cut" in result.logs
    assert result.logs_cut_bytes > 100_000


@pytest.mark.parametrize(
    ("code", "error_type", "in_message"),
    [
        pytest.param("def main(args):\n    raise ValueError('bad value')", "ValueError", "bad value", id="value-error"),
        pytest.param("def main(args) return 1", "SyntaxError", "line 1", id="syntax-error"),
        pytest.param("import json\nx = 1 / 0\ndef main(args): pass", "ZeroDivisionError", "<run_code>", id="error-at-import"),
        pytest.param("main = 42", "EntrypointNotFound", "'main'", id="entrypoint-not-callable"),
        pytest.param(
            "def main(args):\n    xs = []\n    xs.append(xs)\n    return xs", "InvalidOutput", "holds itself",
            id="circular-output",
        ),
        pytest.param("def main(args): return 10**5000", "InvalidOutput", "JSON", id="huge-int-output"),
        pytest.param("import sys\ndef main(args): sys.exit(3)", "SystemExit", "3", id="sys-exit"),
        pytest.param("def main(args): exit()", "SystemExit", "exit", id="builtin-exit"),
        pytest.param(
            "def main(args): raise KeyboardInterrupt", "KeyboardInterrupt", "KeyboardInterrupt", id="base-exception"
        ),
        pytest.param(
            "def main(args):\n    class Boom(Exception): pass\n    raise Boom('x')", "Boom", "Boom: x", id="custom-exception"
        ),
    ],
)
def test_error_types(run_code, code, error_type, in_message):
    result = run_code(code)
    assert result.status == "failed"
    assert result.error.type == error_type
    assert in_message in result.error.message
    assert result.output is None


@pytest.mark.parametrize(
    ("code", "output", "warned"),
    [
        pytest.param("def main(args): return {2, 1}", [1, 2], None, id="set-as-sorted-list"),
        pytest.param("def main(args): return [1.5, float('nan')]", [1.5, None], "output[1]", id="nan-as-null"),
        pytest.param("def main(args): return {'x': float('-inf')}", {"x": None}, 'output["x"]', id="inf-as-null"),
        pytest.param("def main(args): return {(1, 2): 'tuple key'}", {"(1, 2)": "tuple key"}, None, id="tuple-key-as-text"),
    ],
)
def test_values_without_a_json_form_complete_with_a_warning(run_code, code, output, warned):
    """Not a failed run (docs/run-contract.md): NaN and infinities are null with a warning
    naming where; a set a sorted list; a key with no JSON form its text."""
    result = run_code(code)
    assert result.status == "completed", result.error
    assert result.output == output
    if warned is not None:
        assert any(warned in w for w in result.warnings), result.warnings


def test_traceback_shows_user_code_not_the_harness(run_code):
    result = run_code("def helper():\n    raise RuntimeError('deep')\ndef main(args):\n    helper()")
    message = result.error.message
    assert message.startswith("Traceback (most recent call last):")
    assert 'File "<run_code>", line 4, in main' in message
    assert 'line 2, in helper' in message
    assert "_boot" not in message


def test_named_entrypoint(run_code):
    result = run_code("def go(args):\n    return args['x'] * 2", args={"x": 21}, function="go")
    assert result.output == 42


def test_result_too_large_is_invalid_output(run_code):
    result = run_code("def main(args):\n    return 'x' * 5000", result_bytes=1000)
    assert result.status == "failed"
    assert result.error.type == "InvalidOutput"
    assert "blobs" in result.error.message


def test_messages_leak_no_host_paths(run_code, engine):
    code = "import os\ndef main(args):\n    open('/nope/x')\n"
    result = run_code(code)
    text = result.error.message + result.logs
    for host_path in (str(engine.image.guest.lib_dir), str(engine.loop.workspace_root), "/root", "site-packages"):
        assert host_path not in text


def test_direct_writes_to_stdout_stay_in_order_with_prints(run_code):
    code = (
        "import os\n"
        "def main(args):\n"
        "    print('first')\n"
        "    os.write(2, b'second\\n')\n"
        "    print('third')\n"
    )
    assert run_code(code).logs == "first\nsecond\nthird\n"
