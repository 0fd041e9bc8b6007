"""An Azure Container Apps dynamic-sessions front: code written for LangChain's
`SessionsPythonREPLTool`, LlamaIndex's `AzureCodeInterpreterToolSpec` or AutoGen's
`ACADynamicSessionsCodeExecutor` runs against wasmrun (docs/azure.md). One `identifier`
is one wasmrun session of the tenant whose key made the call; every call goes through
the protocol's Dispatcher as that tenant."""
