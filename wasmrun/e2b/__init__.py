"""An E2B-compatible front: code written for `e2b_code_interpreter` runs against wasmrun
(docs/e2b.md). One E2B sandbox is one wasmrun session; every call goes through the
protocol's Dispatcher as the tenant whose API key made it."""
