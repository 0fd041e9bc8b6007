"""wasmrun as the sandbox backend of agent frameworks (docs/agents.md).

Each adapter maps a framework's own sandbox interface onto one wasmrun session
(its files in /workspace and /tmp carry over between commands) through the typed
client (wasmrun.client):

- `wasmrun.adapters.sandbox`: `WasmrunSandbox`, framework-free: commands
  (`run_command`), files in and out (blobs and a run in the session), the session's
  life. The adapters below are thin layers on it.
- `wasmrun.adapters.deepagents`: `WasmrunBackend`, LangChain deepagents'
  `SandboxBackendProtocol` (`pip install 'wasmrun[adapters]'`).
- `wasmrun.adapters.pydantic_ai`: `WasmrunWorkspaceBackend`, Pydantic AI's workspace
  backend protocol (`pydantic_ai.workspaces`), and `WasmrunWorkspace`, the capability that
  gives an agent's runs one (`pip install 'wasmrun[adapters]'`).
- `wasmrun.adapters.pydantic_ai_code_mode`: `WasmrunCodeMode`, pydantic-ai-harness's `CodeMode`
  with its `run_code` run in a session, the nested tool calls as wasmrun's code-mode round trips
  (docs/code-mode.md; `pip install 'wasmrun[adapters]'`).
- `wasmrun.adapters.smolagents`: `WasmrunExecutor`, smolagents' remote Python executor for
  `CodeAgent(executor=...)`: every step's code in one session (`pip install 'wasmrun[adapters]'`).

Nothing here is imported by the server: the frameworks are optional extras, and
each adapter module imports its framework at the top, so importing it without the
extra fails at once with the framework's name.
"""
