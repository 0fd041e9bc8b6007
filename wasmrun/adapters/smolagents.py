"""smolagents' `CodeAgent` running its code in one wasmrun session (docs/agents.md).

    from smolagents import CodeAgent, InferenceClientModel
    from wasmrun.adapters.smolagents import WasmrunExecutor

    executor = WasmrunExecutor.connect("http://127.0.0.1:8080")
    agent = CodeAgent(tools=[], model=InferenceClientModel(), executor=executor)
    try:
        print(agent.run("How many primes are below 1000?"))
    finally:
        agent.cleanup()                             # closes the session

`WasmrunExecutor` is a `smolagents.remote_executors.RemotePythonExecutor` (smolagents
1.26.0), as its E2B, Modal, Docker and Blaxel executors are, so the agent loop treats it
as theirs:

- Every step's code runs in ONE session (`run_code` with `session_id`): the globals one step
  sets are there in the next, as in a notebook. The step's code is run by a small function
  of the adapter (`_wasmrun_smolagents_step`, the run's entry point) that executes it in the
  session's globals, so a `def main` the agent writes is never called by the run contract.
  The value of the step's last line, when it is an expression, is the step's output.
- `print()` (stdout and stderr) is the step's logs: the next step's observation. Logs past
  `max_print_outputs_length` are cut, with a line saying how much was dropped.
- `final_answer(...)` is detected as the other remote executors detect it: the base class
  patches the `final_answer` tool to raise a `FinalAnswerException` carrying the value
  serialized ("safe:" JSON, or "pickle:" base64 when `allow_pickle=True`); the step function
  returns that text as the run's output, and `_deserialize_final_answer` reads it back.
- `send_variables` / `send_tools` are the base class's: the variables are serialized into a
  step, the tools' source is sent into the session and instantiated there.
- An error in the code (a traceback), or a run stopped by a limit (time, CPU, memory, output),
  raises `smolagents.utils.AgentError` with the logs and the error, as `E2BExecutor` does; the
  agent turns it into an `AgentExecutionError` the model sees in its next step. A run a limit
  stopped is rolled back: the session is as it was before that step.
- Packages: a session's packages are fixed when it is created (`create_session`'s `packages`,
  installed on demand: docs/packages.md). `WasmrunExecutor(packages=[...])` asks for them;
  The agent's additional imports (`additional_imports`) must each be importable in the session:
  the others are refused by name when the executor is made. `install_packages` (a tool's
  requirements) installs nothing: it logs the ones the session cannot import.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from smolagents.local_python_executor import CodeOutput
from smolagents.monitoring import AgentLogger, LogLevel
from smolagents.remote_executors import RemotePythonExecutor
from smolagents.tools import Tool, get_tools_definition_code
from smolagents.utils import AgentError

from wasmrun.adapters.sandbox import WasmrunSandbox
from wasmrun.client import Client
from wasmrun.protocol.types import ExecutionResult, RunError

__all__ = ["WasmrunExecutor"]

# smolagents' own default for how much of a step's printed output the model is shown.
DEFAULT_MAX_PRINT_OUTPUTS_LENGTH = 50_000

_STEP_ENTRY = "_wasmrun_smolagents_step"
_PROBE_ENTRY = "_wasmrun_smolagents_probe"

# Runs one step's code in the session's globals. The answer is a dict: {"value": the last
# line's value}, {"final_answer": the serialized value final_answer raised}, or {"error": ...}
# with the traceback (this function's own frame left out). Anything that is not an Exception
# (the sandbox stopping the run at a limit) is not caught.
_STEP_CODE = '''
def _wasmrun_smolagents_step(args):
    import ast, linecache, traceback
    code, name = args["code"], args["name"]
    scope = globals()
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        tree = ast.parse(code, filename=name)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), scope)
        value = eval(compile(last, name, "eval"), scope) if last is not None else None
    except BaseException as exc:
        if type(exc).__name__ == "FinalAnswerException":
            return {"final_answer": exc.value}
        if not isinstance(exc, Exception):
            raise
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)
        return {"error": type(exc).__name__, "message": str(exc), "traceback": "".join(lines)}
    return {"value": value}
'''

# The step function's own frame in a traceback of a run the sandbox stopped: not the agent's code.
_WRAPPER_FRAME = re.compile(r'  File "<cell \d+>", line \d+, in _wasmrun_smolagents_step\n(?:    .*\n)?')

_PROBE_CODE = '''
def _wasmrun_smolagents_probe(args):
    import importlib.util
    missing = []
    for name in args["modules"]:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(name)
    return missing
'''


class WasmrunExecutor(RemotePythonExecutor):  # type: ignore[misc]  # smolagents ships no type information
    """A smolagents remote executor on one wasmrun session.

    `client`: a `wasmrun.client.Client` (kept open by its owner; `connect` makes one this
    executor owns). `session_id`: run in that session instead of creating one (it is then not
    closed by `cleanup`). `packages`: the new session's packages (names or `name==version`,
    installed on demand by the server). `limits` / `idle_timeout_s`: the new session's
    (docs/sessions.md). `timeout_ms`: each step's time limit (the session's own when None).
    `additional_imports`: modules the code may import: each must be importable in the session.
    """

    def __init__(
        self,
        additional_imports: list[str] | None = None,
        logger: AgentLogger | None = None,
        allow_pickle: bool = False,
        *,
        client: Client,
        session_id: str | None = None,
        packages: list[str] | None = None,
        limits: dict[str, int] | None = None,
        idle_timeout_s: int | None = None,
        timeout_ms: int | None = None,
        max_print_outputs_length: int = DEFAULT_MAX_PRINT_OUTPUTS_LENGTH,
        owns_client: bool = False,
    ) -> None:
        super().__init__(list(additional_imports or []), logger or AgentLogger(level=LogLevel.INFO), allow_pickle)
        self.client = client
        self.timeout_ms = timeout_ms
        self.max_print_outputs_length = max_print_outputs_length
        self._owns_client = owns_client
        self._created_here = session_id is None
        self._steps = 0
        if session_id is None:
            info = client.create_session(
                limits=dict(limits) if limits else None, idle_timeout_s=idle_timeout_s, packages=list(packages or []),
            )
            session_id = info.session_id
            self.session_packages: list[str] = list(info.packages)
        else:
            if packages:
                raise ValueError("wasmrun: `packages` are given to a new session; a session handed in keeps its own")
            self.session_packages = []
        self.session_id: str = session_id
        self.installed_packages = self._check_imports(self.additional_imports)
        self.logger.log(f"wasmrun session {self.session_id} is running", level=LogLevel.INFO)

    @classmethod
    def connect(cls, url: str, *, api_key: str | None = None, timeout: float = 120.0, **options: Any) -> WasmrunExecutor:
        """An executor on its own client for `url` (closed by `cleanup`)."""
        return cls(client=Client(url, api_key=api_key, timeout=timeout), owns_client=True, **options)

    @property
    def sandbox(self) -> WasmrunSandbox:
        """The session as a `WasmrunSandbox` (commands, files in and out); it does not own the session."""
        return WasmrunSandbox(self.client, self.session_id)

    # -- smolagents' RemotePythonExecutor -------------------------------------------------

    def send_tools(self, tools: dict[str, Tool]) -> None:
        """The base class's, but for the imports: smolagents writes each import of a tool's module
        at the top of the source it sends (the `final_answer` tool's `import numpy` and `import
        PIL` too, which its code only tries). Those of modules the session cannot import are sent
        guarded (`try: import numpy / except ImportError: pass`), so the tools are defined; a tool
        that does use one fails in the step that calls it, with the name missing."""
        if "final_answer" in tools:
            self._patch_final_answer_with_exception(tools["final_answer"])
        requirements = sorted({pkg for t in tools.values() for pkg in t.to_dict()["requirements"]} - {"smolagents"})
        self.installed_packages += [r for r in self.install_packages(requirements) if r not in self.installed_packages]
        code = get_tools_definition_code(tools)
        if code:
            missing = set(self._missing(requirements))
            self.logger.log(self.run_code_raise_errors(_guard_imports(code, missing)).logs)

    def install_packages(self, additional_imports: list[str]) -> list[str]:
        """Called by `send_tools` with the tools' requirements (the modules their source imports,
        optional ones too: the `final_answer` tool's names numpy and PIL). A session cannot add
        packages once made, so nothing is installed: the ones not importable in the session are
        logged by name, and a tool that needs one fails in the step that calls it."""
        missing = self._missing(additional_imports)
        if missing:
            self.logger.log(
                f"wasmrun: the tools' requirements {', '.join(missing)} are not importable in session {self.session_id} "
                "(a session's packages are fixed when it is created: WasmrunExecutor(packages=[...]))",
                level=LogLevel.INFO,
            )
        return list(additional_imports)

    def _check_imports(self, additional_imports: list[str]) -> list[str]:
        """The agent's additional imports: each must be importable in the session, else refused by name."""
        missing = self._missing(additional_imports)
        if missing:
            raise AgentError(
                f"wasmrun: {', '.join(missing)} not importable in session {self.session_id}; a session's packages "
                "are fixed when it is created: give them as WasmrunExecutor(packages=[...]) (installed on demand, "
                "docs/packages.md)",
                self.logger,
            )
        return list(additional_imports)

    def _missing(self, names: list[str]) -> list[str]:
        """The top-level modules of `names` (a "*" wildcard left out) that the session cannot import."""
        modules = sorted({name.split(".")[0] for name in names if name and not name.endswith("*")})
        if not modules:
            return []
        result = self.client.run_code(_PROBE_CODE, entrypoint=_PROBE_ENTRY, args={"modules": modules}, session_id=self.session_id)
        if result.status != "completed" or not isinstance(result.output, list):
            raise AgentError(f"wasmrun: could not check the session's modules: {_error_text(result)}", self.logger)
        return [str(name) for name in result.output]

    def run_code_raise_errors(self, code: str) -> CodeOutput:
        """Run `code` as the next step of the session; its logs, its last line's value, or its
        final answer. An error in the code or a limit raises `AgentError`."""
        self._steps += 1
        result = self.client.run_code(
            _STEP_CODE, entrypoint=_STEP_ENTRY, args={"code": code, "name": f"<step {self._steps}>"},
            timeout_ms=self.timeout_ms, session_id=self.session_id,
        )
        logs = self._logs(result)
        if result.status != "completed":
            undone = result.session_rolled_back is True
            rolled_back = " (the step was undone: the session is as it was before it)" if undone else ""
            error = result.error if isinstance(result.error, RunError) else RunError(type="RunFailed", message=result.summary)
            message = _WRAPPER_FRAME.sub("", error.message)
            raise AgentError(f"{logs}\nExecuting code yielded an error:\n{error.type}{rolled_back}\n{message}", self.logger)
        answer = result.output
        if isinstance(answer, dict) and "output_blob" in answer:
            answer = self._stored_output(answer["output_blob"], int(answer.get("size_bytes", 0)))
        if not isinstance(answer, dict):
            raise AgentError(f"wasmrun: the step answered {type(answer).__name__}, not the step's record", self.logger)
        if "final_answer" in answer:
            value = self._deserialize_final_answer(answer["final_answer"], self.allow_pickle)
            return CodeOutput(output=value, logs=logs, is_final_answer=True)
        if "error" in answer:
            raise AgentError(
                f"{logs}\nExecuting code yielded an error:\n{answer['error']}\n{answer['message']}\n{answer['traceback']}",
                self.logger,
            )
        return CodeOutput(output=answer.get("value"), logs=logs, is_final_answer=False)

    def cleanup(self) -> None:
        """Close the session if this executor created it; then the client if it owns it."""
        try:
            if self._created_here:
                self._created_here = False
                self.client.close_session(self.session_id)
        finally:
            if self._owns_client:
                self._owns_client = False
                self.client.close()

    # -- helpers --------------------------------------------------------------------------

    def _logs(self, result: ExecutionResult) -> str:
        """The step's printed output, at most `max_print_outputs_length` characters: the whole
        of it from the logs blob when the preview was cut (the blob is deleted once read)."""
        logs = result.logs_preview
        blob_id = result.logs_blob if isinstance(result.logs_blob, str) else None
        if blob_id is not None:
            try:
                blob = self.client.read_blob(blob_id, mode="sample_head", max_bytes=self.max_print_outputs_length)
                logs = base64.b64decode(blob.content).decode(errors="replace") if blob.encoding == "base64" else blob.content
            finally:
                self.client.delete_blob(blob_id)
            if blob.truncated:
                cap = self.max_print_outputs_length
                return f"{logs}\n[wasmrun: the output was cut to its first {cap} bytes of the {blob.size_bytes} kept]"
        if len(logs) > self.max_print_outputs_length:
            cap = self.max_print_outputs_length
            logs = f"{logs[:cap]}\n[wasmrun: the output was cut to {cap} characters]"
        return logs

    def _stored_output(self, blob_id: str, size: int) -> Any:
        """A step's answer too large to come back inline (a long final answer): stored by the
        server as a JSON blob; read whole, then deleted."""
        try:
            blob = self.client.read_blob(blob_id, mode="full", max_bytes=max(size, 1))
        finally:
            self.client.delete_blob(blob_id)
        if blob.truncated:
            raise AgentError(f"wasmrun: the step's answer ({size} bytes) is larger than the server's full-read cap", self.logger)
        text = base64.b64decode(blob.content).decode() if blob.encoding == "base64" else blob.content
        return json.loads(text)


def _guard_imports(code: str, missing: set[str]) -> str:
    """`code` with each top-level `import m` / `from m import ...` of a module in `missing`
    wrapped in try/except ImportError."""
    lines = []
    for line in code.splitlines():
        found = _TOP_IMPORT.match(line)
        if found and found.group(1) in missing:
            line = f"try:\n    {line}\nexcept ImportError:\n    pass"
        lines.append(line)
    return "\n".join(lines) + "\n"


_TOP_IMPORT = re.compile(r"^(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)")


def _error_text(result: ExecutionResult) -> str:
    return f"{result.error.type}: {result.error.message}" if isinstance(result.error, RunError) else result.summary
