"""The bundled action skills' logic, run natively against a fake `runtime` package.

Each skill is imported the way the sandbox does it: its entrypoint file loaded as
a package whose path is the entrypoint's folder, so the skill's relative imports
resolve to its own modules. The fake `runtime.blobs` / `runtime.log` keep blobs
and log lines in memory for the duration of one test.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SKILLS_DIR = Path(__file__).resolve().parents[2] / "skills"
# The protocol's limit for a run's `output`.
MAX_OUTPUT_BYTES = 4096

Skill = Callable[[dict[str, Any]], dict[str, Any]]


class FakeBlobs:
    """In-memory blobs with the call signatures of the sandbox's `runtime.blobs`."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self._ids = itertools.count(1)

    def put(self, content: str | bytes) -> str:
        blob_id = f"blob:test{next(self._ids)}"
        self.data[blob_id] = content.encode("utf-8") if isinstance(content, str) else content
        return blob_id

    def read_bytes(self, blob_id: str, offset: int = 0, length: int | None = None) -> bytes:
        data = self.data[blob_id]  # KeyError, like the runtime's BlobNotFound
        end = len(data) if length is None else min(len(data), offset + length)
        return data[offset:end]

    def read_text(self, blob_id: str, encoding: str = "utf-8") -> str:
        return self.read_bytes(blob_id).decode(encoding)

    def write_text(self, content: str, kind: str = "text/plain") -> str:
        if not isinstance(content, str):
            raise TypeError(f"write_text() takes a str, not {type(content).__name__}")
        return self.put(content)

    def write_json(self, obj: Any, kind: str = "application/json") -> str:
        # allow_nan=False: the real output path rejects NaN, so must the skills.
        return self.put(json.dumps(obj, ensure_ascii=False, allow_nan=False))

    def json(self, blob_id: str) -> Any:
        return json.loads(self.data[blob_id])


@pytest.fixture
def blobs(monkeypatch: pytest.MonkeyPatch) -> FakeBlobs:
    """A fake `runtime` package (blobs + log) installed in sys.modules for one test."""
    store = FakeBlobs()
    blobs_module = types.ModuleType("runtime.blobs")
    for name in ("read_bytes", "read_text", "write_text", "write_json"):
        setattr(blobs_module, name, getattr(store, name))
    log_module = types.ModuleType("runtime.log")
    log_module.info = lambda msg: None
    log_module.error = lambda msg: None
    runtime = types.ModuleType("runtime")
    runtime.__path__ = []  # a package, so `from runtime import blobs` resolves
    runtime.blobs = blobs_module
    runtime.log = log_module
    for name, module in (("runtime", runtime), ("runtime.blobs", blobs_module), ("runtime.log", log_module)):
        monkeypatch.setitem(sys.modules, name, module)
    return store


def _load(skill_name: str) -> types.ModuleType:
    code_dir = SKILLS_DIR / skill_name / "code"
    # Mirrors the sandbox's finder: `skills.<name>` is the entrypoint, as a package.
    module_name = f"skills.{skill_name}"
    spec = importlib.util.spec_from_file_location(
        module_name, code_dir / "main.py", submodule_search_locations=[str(code_dir)]
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def load_skill(blobs: FakeBlobs, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], types.ModuleType]]:
    """Import a bundled skill fresh (bound to this test's fake runtime); unload it after."""
    # The skill folders are shipped as they are: keep __pycache__ out of them.
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    loaded: list[str] = []

    def load(skill_name: str) -> types.ModuleType:
        loaded.append(f"skills.{skill_name}")
        return _load(skill_name)

    yield load
    for key in [k for k in sys.modules if any(k == p or k.startswith(p + ".") for p in loaded)]:
        del sys.modules[key]


def _checked(module: types.ModuleType) -> Skill:
    """The skill's entrypoint, asserting the output contract on every call."""

    def call(args: dict[str, Any]) -> dict[str, Any]:
        out = module.main(args)
        encoded = json.dumps(out, ensure_ascii=False, allow_nan=False).encode("utf-8")
        assert len(encoded) < MAX_OUTPUT_BYTES, f"output is {len(encoded)} bytes"
        assert isinstance(out.get("summary"), str) and out["summary"]
        return out

    return call


@pytest.fixture
def csv_module(load_skill: Callable[[str], types.ModuleType]) -> types.ModuleType:
    return load_skill("data.csv.profile")


@pytest.fixture
def csv_profile(csv_module: types.ModuleType) -> Skill:
    return _checked(csv_module)


@pytest.fixture
def json_query(load_skill: Callable[[str], types.ModuleType]) -> Skill:
    return _checked(load_skill("data.json.query"))


@pytest.fixture
def text_stats(load_skill: Callable[[str], types.ModuleType]) -> Skill:
    return _checked(load_skill("text.stats"))


def _column(out: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in out["columns"] if c["name"] == name)


# -- data.csv.profile ----------------------------------------------------------

ORDERS_CSV = (
    "order_id,customer,amount,paid,ordered_at,zip\n"
    "1001,Ann Lee,19.99,true,2024-03-01,02139\n"
    "1002,Bob Stone,5,false,2024-03-02,10001\n"
    "1003,Zoë Díaz,N/A,yes,2024-03-02T14:05:00,94103\n"
    "1004,Ann Lee,120.5,no,2024-03-04,02139\n"
    "1005,,7.25,true,2024-03-05,\n"
)


def test_csv_profiles_every_column(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put(ORDERS_CSV)
    out = csv_profile({"blob_id": blob_id, "top_n": 2})

    assert (out["rows"], out["column_count"], out["delimiter"]) == (5, 6, ",")
    assert (out["truncated"], out["ragged_rows"], out["columns_omitted"]) == (False, 0, 0)
    assert [c["type"] for c in out["columns"]] == ["int", "string", "float", "bool", "datetime", "string"]
    order_id = _column(out, "order_id")
    assert (order_id["min"], order_id["max"], order_id["mean"], order_id["distinct"]) == (1001, 1005, 1003.0, 5)
    amount = _column(out, "amount")
    assert (amount["null"], amount["min"], amount["max"], amount["mean"]) == (1, 5.0, 120.5, 38.185)
    assert _column(out, "customer")["top"] == [["Ann Lee", 2], ["Bob Stone", 1]]
    assert _column(out, "customer")["empty"] == 1
    assert (_column(out, "ordered_at")["min"], _column(out, "ordered_at")["max"]) == ("2024-03-01", "2024-03-05")
    assert "5 rows x 6 columns" in out["summary"]


def test_csv_report_blob_has_full_detail(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put(ORDERS_CSV)
    out = csv_profile({"blob_id": blob_id})

    report = blobs.json(out["report_blob"])
    assert report["blob_id"] == blob_id
    assert report["rows"] == 5 and len(report["columns"]) == 6
    zip_column = next(c for c in report["columns"] if c["name"] == "zip")
    # "10001" and "94103" are ints, but the leading-zero zips make the column text.
    assert zip_column["type_counts"] == {"int": 2, "string": 2}
    assert (zip_column["min_length"], zip_column["max_length"]) == (5, 5)


@pytest.mark.parametrize(
    ("cells", "expected"),
    [
        pytest.param(["1", "-2", "+3", " 42 "], "int", id="ints-signed-padded"),
        pytest.param(["1", "2.5", "1e3", ".5"], "float", id="ints-and-floats"),
        pytest.param(["true", "FALSE", "yes", "No"], "bool", id="bools-any-case"),
        pytest.param(["2024-01-31", "1999-12-01"], "date", id="iso-dates"),
        pytest.param(["2024-01-31", "2024-02-01T10:00:00+02:00", "2024-02-01 09:00Z"], "datetime",
                     id="dates-and-datetimes"),
        pytest.param(["007", "0123"], "string", id="leading-zero-numbers-are-ids"),
        pytest.param(['"1,000"', '"2,500"'], "string", id="thousands-separators"),
        pytest.param(["inf", "-infinity"], "string", id="infinity-is-text"),
        pytest.param(["1e999"], "string", id="float-overflow-is-text"),
        pytest.param(["1_000"], "string", id="python-underscore-literal"),
        pytest.param(["٣", "٤"], "string", id="non-ascii-digits"),
        pytest.param(["1" * 301], "string", id="huge-integer"),
        pytest.param(["2024-13-45"], "string", id="impossible-date"),
        pytest.param(["1", "x"], "string", id="mixed"),
        pytest.param(["", " ", "NULL", "n/a"], "empty", id="only-missing"),
    ],
)
def test_csv_infers_column_type(blobs: FakeBlobs, csv_profile: Skill, cells: list[str], expected: str) -> None:
    # A second, always-filled column keeps rows with a blank cell from being blank lines.
    blob_id = blobs.put("value,other\n" + "".join(f"{cell},x\n" for cell in cells))
    out = csv_profile({"blob_id": blob_id})
    assert out["columns"][0]["type"] == expected


def test_csv_datetime_min_max_are_chronological_across_offsets(blobs: FakeBlobs, csv_profile: Skill) -> None:
    # 10:00+02:00 is 08:00 UTC, earlier than 09:00Z although it sorts later as text.
    blob_id = blobs.put("t\n2024-02-01T09:00:00Z\n2024-02-01T10:00:00+02:00\n")
    column = csv_profile({"blob_id": blob_id})["columns"][0]
    assert (column["min"], column["max"]) == ("2024-02-01T10:00:00+02:00", "2024-02-01T09:00:00Z")


def test_csv_counts_empty_and_null_cells(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put("a\n1\n\"\"\n  \nNULL\nn/a\nNaN\n#N/A\nnone\n2\n")
    column = csv_profile({"blob_id": blob_id})["columns"][0]
    # The whitespace-only line is a blank line, not a row; the quoted "" is an empty cell.
    assert (column["type"], column["empty"], column["null"], column["distinct"]) == ("int", 1, 5, 2)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("", id="empty-blob"),
        pytest.param("\n\n  \n", id="blank-lines-only"),
        pytest.param("\ufeff", id="bom-only"),
    ],
)
def test_csv_empty_blob(blobs: FakeBlobs, csv_profile: Skill, content: str) -> None:
    out = csv_profile({"blob_id": blobs.put(content)})
    assert (out["rows"], out["column_count"], out["columns"]) == (0, 0, [])
    assert "empty" in out["summary"]
    assert blobs.json(out["report_blob"])["columns"] == []


def test_csv_header_only(blobs: FakeBlobs, csv_profile: Skill) -> None:
    out = csv_profile({"blob_id": blobs.put("id,name,price\n")})
    assert (out["rows"], out["column_count"]) == (0, 3)
    assert [c["type"] for c in out["columns"]] == ["empty"] * 3
    assert all(c["distinct"] == 0 and c["top"] == [] for c in out["columns"])


def test_csv_ragged_rows(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put("a,b,c\n1,2,3\n4,5\n6,7,8,9,10\n11\n")
    out = csv_profile({"blob_id": blob_id})
    assert (out["rows"], out["ragged_rows"], out["column_count"]) == (4, 3, 3)
    assert [c["empty"] for c in out["columns"]] == [0, 1, 2]
    assert _column(out, "c")["max"] == 8  # the extra fields 9 and 10 have no column
    assert "3 rows had a different field count" in out["summary"]


def test_csv_unicode_and_bom(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put("\ufeffnom,ville\nZoë,Zürich\nZoë,東京\nJosé,Zürich\n".encode("utf-8"))
    out = csv_profile({"blob_id": blob_id})
    assert [c["name"] for c in out["columns"]] == ["nom", "ville"]
    assert _column(out, "nom")["top"][0] == ["Zoë", 2]
    assert _column(out, "ville")["distinct"] == 2


def test_csv_header_names_made_unique(blobs: FakeBlobs, csv_profile: Skill) -> None:
    out = csv_profile({"blob_id": blobs.put(" id ,,id,id,\n1,2,3,4,5\n")})
    assert [c["name"] for c in out["columns"]] == ["id", "column_2", "id_2", "id_3", "column_5"]


@pytest.mark.parametrize(
    ("content", "args", "delimiter", "columns"),
    [
        pytest.param("a;b;c\n1;2;3\n", {}, ";", 3, id="detect-semicolon"),
        pytest.param("a\tb\n1\t2\n", {}, "\t", 2, id="detect-tab"),
        pytest.param("a|b\n1|2\n", {}, "|", 2, id="detect-pipe"),
        pytest.param("single\n1\n", {}, ",", 1, id="single-column-defaults-to-comma"),
        pytest.param("a;b,c\n1;2,3\n", {"delimiter": ","}, ",", 2, id="explicit-overrides-detection"),
        pytest.param("\n\na:b\n1:2\n", {"delimiter": ":"}, ":", 2, id="leading-blank-lines"),
    ],
)
def test_csv_delimiter(blobs: FakeBlobs, csv_profile: Skill, content: str, args: dict[str, Any],
                       delimiter: str, columns: int) -> None:
    out = csv_profile({"blob_id": blobs.put(content), **args})
    assert (out["delimiter"], out["column_count"], out["rows"]) == (delimiter, columns, 1)


def test_csv_quoted_fields_with_delimiters_and_newlines(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put('id,note\r\n1,"a, b"\r\n2,"line one\nline two"\r\n3,"say ""hi"""\r\n')
    out = csv_profile({"blob_id": blob_id})
    assert (out["rows"], out["ragged_rows"]) == (3, 0)
    report = blobs.json(out["report_blob"])
    assert [value for value, _ in report["columns"][1]["top"]] == ["a, b", "line one\nline two", 'say "hi"']


def test_csv_reads_across_chunk_boundaries(blobs: FakeBlobs, csv_module: types.ModuleType,
                                           csv_profile: Skill, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tiny chunks split multi-byte characters and records between reads.
    monkeypatch.setattr(csv_module.source, "CHUNK_BYTES", 3)
    blob_id = blobs.put("name,city\n" + "Zoë,Zürich\n" * 20 + '"multi\nline",東京\n')
    out = csv_profile({"blob_id": blob_id})
    assert out["rows"] == 21
    assert _column(out, "name")["top"][0] == ["Zoë", 20]
    assert _column(out, "city")["distinct"] == 2


@pytest.mark.parametrize(
    ("max_rows", "rows", "truncated"),
    [
        pytest.param(2, 2, True, id="stops-early"),
        pytest.param(3, 3, False, id="exactly-all-rows"),
        pytest.param(100, 3, False, id="more-than-rows"),
    ],
)
def test_csv_max_rows(blobs: FakeBlobs, csv_profile: Skill, max_rows: int, rows: int, truncated: bool) -> None:
    out = csv_profile({"blob_id": blobs.put("n\n1\n2\n3\n"), "max_rows": max_rows})
    assert (out["rows"], out["truncated"]) == (rows, truncated)
    assert ("more rows remain" in out["summary"]) is truncated


def test_csv_top_n(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put("v\nb\na\nb\nc\na\nb\n")
    assert csv_profile({"blob_id": blob_id, "top_n": 2})["columns"][0]["top"] == [["b", 3], ["a", 2]]
    assert csv_profile({"blob_id": blob_id, "top_n": 0})["columns"][0]["top"] == []


def test_csv_distinct_tracking_is_bounded(blobs: FakeBlobs, csv_module: types.ModuleType,
                                          csv_profile: Skill, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(csv_module.columns, "TRACKED_VALUES_BUDGET", 10)
    monkeypatch.setattr(csv_module.columns, "MIN_TRACKED_PER_COLUMN", 5)
    blob_id = blobs.put("a,b\n" + "".join(f"{i},{i % 2}\n" for i in range(50)))
    out = csv_profile({"blob_id": blob_id})
    assert (_column(out, "a")["distinct"], _column(out, "a")["distinct_is_lower_bound"]) == (5, True)
    assert _column(out, "a")["mean"] == 24.5  # numeric stats still see every row
    assert _column(out, "b")["distinct"] == 2 and "distinct_is_lower_bound" not in _column(out, "b")


def test_csv_wide_table_output_stays_small(blobs: FakeBlobs, csv_profile: Skill) -> None:
    names = [f"a_rather_long_column_name_number_{i:03d}_" + "x" * 30 for i in range(60)]
    row = ",".join("v" * 200 + str(i) for i in range(60))
    out = csv_profile({"blob_id": blobs.put(",".join(names) + "\n" + (row + "\n") * 3), "top_n": 50})
    assert out["column_count"] == 60
    assert out["columns_omitted"] == 60 - len(out["columns"]) > 0
    assert all(len(c["name"]) <= 40 for c in out["columns"])
    report = blobs.json(out["report_blob"])
    assert len(report["columns"]) == 60 and report["columns"][0]["name"] == names[0]


def test_csv_non_utf8_blob_needs_encoding(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put("name\nJosé\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r'not valid utf-8 text.*pass "encoding"'):
        csv_profile({"blob_id": blob_id})
    out = csv_profile({"blob_id": blob_id, "encoding": "latin-1"})
    assert out["columns"][0]["top"] == [["José", 1]]


def test_csv_oversized_field_is_a_clear_error(blobs: FakeBlobs, csv_profile: Skill) -> None:
    blob_id = blobs.put("\n\na\n1\n" + "x" * 200_000 + "\n")
    with pytest.raises(ValueError, match=r"CSV parse error at line 5: field larger than field limit"):
        csv_profile({"blob_id": blob_id})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param({}, 'missing required argument "blob_id"', id="missing-blob-id"),
        pytest.param({"blob_id": 7}, '"blob_id" must be a string like "blob:', id="blob-id-not-string"),
        pytest.param({"blob_id": "abc"}, '"blob_id" must be a string like "blob:', id="blob-id-no-prefix"),
        pytest.param({"blob_id": "blob:missing"}, "not found or not mounted", id="blob-not-mounted"),
        pytest.param({"blob_id": "blob:x", "top_n": "5"}, '"top_n" must be an integer from 0 to 50', id="top-n-string"),
        pytest.param({"blob_id": "blob:x", "top_n": True}, '"top_n" must be an integer', id="top-n-bool"),
        pytest.param({"blob_id": "blob:x", "top_n": 51}, '"top_n" must be an integer', id="top-n-too-big"),
        pytest.param({"blob_id": "blob:x", "max_rows": 0}, '"max_rows" must be an integer >= 1', id="max-rows-zero"),
        pytest.param({"blob_id": "blob:x", "delimiter": ",,"}, '"delimiter" must be one character', id="delimiter-long"),
        pytest.param({"blob_id": "blob:x", "delimiter": '"'}, '"delimiter" must be one character', id="delimiter-quote"),
        pytest.param({"blob_id": "blob:x", "encoding": "klingon"}, 'unknown "encoding"', id="bad-encoding"),
        pytest.param({"blob_id": "blob:x", "topn": 3}, r"unknown argument\(s\) \['topn'\]", id="unknown-arg"),
    ],
)
def test_csv_bad_args(csv_profile: Skill, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        csv_profile(args)


def test_csv_args_must_be_an_object(csv_profile: Skill) -> None:
    with pytest.raises(ValueError, match="args must be a JSON object, got list"):
        csv_profile(["blob:x"])  # type: ignore[arg-type]


# -- data.json.query -----------------------------------------------------------

DOC: dict[str, Any] = {
    "store": "Corner Books",
    "orders": [
        {"id": 1, "customer": {"name": "Ann", "city": "Boston"}, "total": 42.5, "status": "paid", "tags": ["gift"]},
        {"id": 2, "customer": {"name": "Bob", "city": "Denver"}, "total": 12.0, "status": "open", "tags": []},
        {"id": 3, "customer": {"name": "Zoë", "city": "Boston"}, "total": 99.9, "status": "paid",
         "tags": ["rush", "gift"]},
        {"id": 4, "customer": {"name": "Dan"}, "total": 5, "status": "refunded", "tags": ["rush"], "vip": True},
    ],
    "by_id": {"a": {"name": "first"}, "b": {"name": "second"}},
    "key.with dots": {"größe": 3},
    "groups": [{"members": [{"name": "x"}, {"name": "y"}]}, {"members": []}, {"members": [{"name": "z"}]}],
}


@pytest.fixture
def doc_blob(blobs: FakeBlobs) -> str:
    return blobs.put(json.dumps(DOC, ensure_ascii=False))


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("store", "Corner Books", id="key"),
        pytest.param("$.store", "Corner Books", id="dollar-root"),
        pytest.param("  store  ", "Corner Books", id="surrounding-space"),
        pytest.param("orders[0].customer.name", "Ann", id="nested-index"),
        pytest.param("orders[-1].id", 4, id="negative-index"),
        pytest.param("orders.1.id", 2, id="numeric-key-as-index"),
        pytest.param("orders[*].id", [1, 2, 3, 4], id="wildcard"),
        pytest.param("orders.*.id", [1, 2, 3, 4], id="dot-wildcard"),
        pytest.param("orders[*].customer.city", ["Boston", "Denver", "Boston"], id="wildcard-skips-missing"),
        pytest.param("orders[*].tags[0]", ["gift", "rush", "rush"], id="wildcard-then-index-skips-empty"),
        pytest.param("by_id.*.name", ["first", "second"], id="wildcard-over-object-values"),
        pytest.param("groups[*].members[*].name", ["x", "y", "z"], id="nested-wildcards"),
        pytest.param('["key.with dots"].größe', 3, id="quoted-key-and-unicode"),
        pytest.param("['key.with dots']['größe']", 3, id="single-quoted-keys"),
        pytest.param("orders[*].nope", [], id="wildcard-no-matches"),
    ],
)
def test_json_paths(json_query: Skill, doc_blob: str, path: str, expected: Any) -> None:
    out = json_query({"blob_id": doc_blob, "path": path})
    assert out["result"] == expected
    assert out["result_blob"] is None


@pytest.mark.parametrize("path", [pytest.param(None, id="omitted"), pytest.param("", id="empty"),
                                  pytest.param("$", id="dollar")])
def test_json_root_path(blobs: FakeBlobs, json_query: Skill, path: str | None) -> None:
    blob_id = blobs.put('{"a": 1}')
    args = {"blob_id": blob_id} if path is None else {"blob_id": blob_id, "path": path}
    out = json_query(args)
    assert (out["result"], out["type"], out["count"]) == ({"a": 1}, "object", 1)
    assert out["summary"] == "The document is an object with 1 key."


@pytest.mark.parametrize(
    ("path", "message"),
    [
        pytest.param("orderz", r"no key 'orderz' at \$; its keys are: 'store', 'orders'", id="missing-key-lists-keys"),
        pytest.param("orders[9]", r"index 9 is out of range at \$\.orders, an array of 4", id="index-out-of-range"),
        pytest.param("orders.id", r"\$\.orders is an array of 4; use \[<index>\] or \[\*\] instead of \.id",
                     id="key-on-array"),
        pytest.param("store.name", r"\$\.store is a string \"Corner Books\", which has no 'name'", id="key-on-string"),
        pytest.param("store[*]", r"which has no elements for \[\*\]", id="wildcard-on-scalar"),
        pytest.param("orders[0].customer.zip", r"no key 'zip' at \$\.orders\[0\]\.customer", id="deep-missing"),
    ],
)
def test_json_missing_path_is_a_clear_error(json_query: Skill, doc_blob: str, path: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_query({"blob_id": doc_blob, "path": path})


@pytest.mark.parametrize(
    "path",
    [
        pytest.param("a..b", id="double-dot"),
        pytest.param("a.", id="trailing-dot"),
        pytest.param("a[", id="open-bracket"),
        pytest.param("a[x]", id="bare-word-in-brackets"),
        pytest.param("a]", id="stray-bracket"),
        pytest.param("$a", id="dollar-without-dot"),
        pytest.param('["unterminated]', id="unterminated-quote"),
        pytest.param('["bad \\q escape"]', id="bad-json-escape"),
    ],
)
def test_json_bad_path_syntax(json_query: Skill, doc_blob: str, path: str) -> None:
    with pytest.raises(ValueError, match=r"bad path .* at position \d+: expected"):
        json_query({"blob_id": doc_blob, "path": path})


@pytest.mark.parametrize(
    ("condition", "ids"),
    [
        pytest.param({"field": "status", "op": "==", "value": "paid"}, [1, 3], id="eq-string"),
        pytest.param({"field": "status", "value": "paid"}, [1, 3], id="op-defaults-to-eq"),
        pytest.param({"field": "status", "op": "!=", "value": "paid"}, [2, 4], id="ne"),
        pytest.param({"field": "total", "op": ">", "value": 12}, [1, 3], id="gt"),
        pytest.param({"field": "total", "op": ">=", "value": 12}, [1, 2, 3], id="ge-int-vs-float"),
        pytest.param({"field": "total", "op": "<", "value": 12}, [4], id="lt"),
        pytest.param({"field": "total", "op": "<=", "value": 12.0}, [2, 4], id="le"),
        pytest.param({"field": "customer.name", "op": "<", "value": "B"}, [1], id="lt-strings"),
        pytest.param({"field": "total", "op": ">", "value": "10"}, [], id="no-coercion-number-vs-string"),
        pytest.param({"field": "tags", "op": "contains", "value": "rush"}, [3, 4], id="contains-list"),
        pytest.param({"field": "customer.name", "op": "contains", "value": "o"}, [2, 3], id="contains-substring"),
        pytest.param({"field": "customer", "op": "contains", "value": "city"}, [1, 2, 3], id="contains-key"),
        pytest.param({"field": "customer.city", "op": "==", "value": None}, [4], id="eq-null-matches-missing"),
        pytest.param({"field": "vip", "op": "==", "value": True}, [4], id="eq-true"),
        pytest.param({"field": "id", "op": "==", "value": True}, [], id="true-is-not-one"),
        pytest.param({"field": "tags", "op": "==", "value": []}, [2], id="eq-array"),
        pytest.param({"field": "tags[*]", "op": "contains", "value": "gift"}, [1, 3], id="wildcard-field"),
    ],
)
def test_json_filter_operators(json_query: Skill, doc_blob: str, condition: dict[str, Any], ids: list[int]) -> None:
    out = json_query({"blob_id": doc_blob, "path": "orders", "filter": condition, "select": ["id"]})
    assert [item["id"] for item in out["result"]] == ids
    assert (out["matched"], out["count"]) == (4, len(ids))


def test_json_filter_conditions_are_anded(json_query: Skill, doc_blob: str) -> None:
    out = json_query({"blob_id": doc_blob, "path": "orders", "select": ["id"], "filter": [
        {"field": "tags", "op": "contains", "value": "rush"},
        {"field": "total", "op": ">", "value": 10},
    ]})
    assert out["result"] == [{"id": 3}]


@pytest.mark.parametrize(
    ("sort_by", "descending", "ids"),
    [
        pytest.param("total", False, [4, 2, 1, 3], id="ascending"),
        pytest.param("total", True, [3, 1, 2, 4], id="descending"),
        pytest.param("customer.city", False, [1, 3, 2, 4], id="missing-last-stable-ties"),
        pytest.param("customer.city", True, [2, 1, 3, 4], id="missing-last-when-descending"),
    ],
)
def test_json_sort(json_query: Skill, doc_blob: str, sort_by: str, descending: bool, ids: list[int]) -> None:
    out = json_query({"blob_id": doc_blob, "path": "orders", "sort_by": sort_by, "descending": descending,
                      "select": ["id"]})
    assert [item["id"] for item in out["result"]] == ids


def test_json_sort_ranks_mixed_types(blobs: FakeBlobs, json_query: Skill) -> None:
    blob_id = blobs.put(json.dumps([{"v": "b"}, {"v": True}, {"v": 2}, {"v": None}, {"v": [1]}, {"v": 1.5}, {}]))
    out = json_query({"blob_id": blob_id, "sort_by": "v", "select": ["v"]})
    assert [item["v"] for item in out["result"]] == [1.5, 2, "b", True, [1], None, None]


def test_json_pipeline_order(json_query: Skill, doc_blob: str) -> None:
    out = json_query({
        "blob_id": doc_blob, "path": "orders",
        "filter": {"field": "status", "op": "==", "value": "paid"},
        "sort_by": "total", "descending": True, "limit": 1,
        "select": {"who": "customer.name", "total": "total", "missing": "nope"},
    })
    assert out["result"] == [{"who": "Zoë", "total": 99.9, "missing": None}]
    assert out["summary"] == "Path 'orders' gave 4 items; 1 left after filter/limit."


def test_json_limit_zero(json_query: Skill, doc_blob: str) -> None:
    out = json_query({"blob_id": doc_blob, "path": "orders", "limit": 0})
    assert (out["result"], out["count"], out["matched"]) == ([], 0, 4)


def test_json_select_on_single_object(json_query: Skill, doc_blob: str) -> None:
    out = json_query({"blob_id": doc_blob, "path": "orders[2]", "select": ["id", "customer.city"]})
    assert out["result"] == {"id": 3, "customer.city": "Boston"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param({"path": "by_id", "limit": 1}, r'need an array, but path .by_id. is an object; .*"\.\*"',
                     id="limit-on-object"),
        pytest.param({"path": "store", "filter": {"field": "a", "value": 1}}, "need an array", id="filter-on-string"),
        pytest.param({"path": "store", "select": ["a"]}, '"select" needs an object', id="select-on-string"),
    ],
)
def test_json_list_options_need_an_array(json_query: Skill, doc_blob: str, args: dict[str, Any],
                                         message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_query({"blob_id": doc_blob, **args})


def test_json_large_array_goes_to_a_blob(blobs: FakeBlobs, json_query: Skill) -> None:
    items = [{"id": i, "name": f"item {i}", "note": "é" * 40} for i in range(300)]
    out = json_query({"blob_id": blobs.put(json.dumps({"items": items})), "path": "items"})
    assert "result" not in out
    assert blobs.json(out["result_blob"]) == items
    assert 0 < len(out["preview"]) < 300 and out["preview"] == items[: len(out["preview"])]
    assert (out["count"], out["matched"]) == (300, 300)
    assert out["result_blob"] in out["summary"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("x" * 5000, id="long-string"),
        pytest.param({f"k{i}": i for i in range(1000)}, id="big-object"),
        pytest.param([{"blob": "y" * 3000}], id="array-of-one-huge-element"),
    ],
)
def test_json_large_value_preview_is_text(blobs: FakeBlobs, json_query: Skill, value: Any) -> None:
    out = json_query({"blob_id": blobs.put(json.dumps({"v": value})), "path": "v"})
    assert isinstance(out["preview"], str) and out["preview"].endswith("…")
    assert blobs.json(out["result_blob"]) == value


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param('{"a": 1}\n{"a": 2}\n\n{"a": 3}\n', [1, 2, 3], id="json-lines"),
        pytest.param('\ufeff[{"a": 1}]', [1], id="utf8-bom"),
        pytest.param('[{"a": "x\u2028y"}, {"a": 2}]', ["x\u2028y", 2], id="raw-line-separator-in-string"),
    ],
)
def test_json_input_formats(blobs: FakeBlobs, json_query: Skill, content: str, expected: list[Any]) -> None:
    out = json_query({"blob_id": blobs.put(content), "path": "[*].a"})
    assert out["result"] == expected


def test_json_utf16_document(blobs: FakeBlobs, json_query: Skill) -> None:
    out = json_query({"blob_id": blobs.put('{"name": "Zoë"}'.encode("utf-16")), "path": "name"})
    assert out["result"] == "Zoë"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("", "is empty, not JSON", id="empty"),
        pytest.param("  \n", "is empty, not JSON", id="whitespace"),
        pytest.param("{'a': 1}", "is not valid JSON", id="python-literal"),
        pytest.param('{"a": 1}\n{"a": ', "neither JSON nor JSON Lines: line 2", id="broken-json-lines"),
        pytest.param('{"a": NaN}', "NaN is not valid JSON", id="nan"),
        pytest.param(b"\xff\xfe\xfa", "not UTF-8 text", id="binary"),
    ],
)
def test_json_bad_documents(blobs: FakeBlobs, json_query: Skill, content: str | bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_query({"blob_id": blobs.put(content)})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param({}, 'missing required argument "blob_id"', id="missing-blob-id"),
        pytest.param({"blob_id": ["blob:x"]}, '"blob_id" must be a string like', id="blob-id-list"),
        pytest.param({"blob_id": "blob:missing"}, "not found or not mounted", id="blob-not-mounted"),
        pytest.param({"blob_id": "blob:x", "path": 3}, '"path" must be a path string', id="path-not-string"),
        pytest.param({"blob_id": "blob:x", "filter": "status=paid"}, '"filter" must be an object', id="filter-string"),
        pytest.param({"blob_id": "blob:x", "filter": []}, '"filter" must be an object', id="filter-empty-list"),
        pytest.param({"blob_id": "blob:x", "filter": {"field": "a", "op": "~", "value": 1}},
                     r'filter\[0\] has unknown "op"', id="unknown-op"),
        pytest.param({"blob_id": "blob:x", "filter": {"field": "a", "op": "=="}}, r'filter\[0\] needs a "value"',
                     id="filter-without-value"),
        pytest.param({"blob_id": "blob:x", "filter": {"op": "==", "value": 1}}, r'filter\[0\] needs a "field"',
                     id="filter-without-field"),
        pytest.param({"blob_id": "blob:x", "filter": [{"field": "a", "value": 1}, {"field": "a", "val": 1}]},
                     r"filter\[1\] has unknown key\(s\) \['val'\]", id="filter-unknown-key"),
        pytest.param({"blob_id": "blob:x", "select": []}, '"select" must be a non-empty array', id="select-empty"),
        pytest.param({"blob_id": "blob:x", "select": ["a", 1]}, '"select" must be', id="select-non-string"),
        pytest.param({"blob_id": "blob:x", "sort_by": ["a"]}, '"sort_by" must be a path string', id="sort-by-list"),
        pytest.param({"blob_id": "blob:x", "descending": "yes"}, '"descending" must be true or false',
                     id="descending-string"),
        pytest.param({"blob_id": "blob:x", "limit": -1}, '"limit" must be an integer >= 0', id="limit-negative"),
        pytest.param({"blob_id": "blob:x", "limit": False}, '"limit" must be an integer', id="limit-bool"),
        pytest.param({"blob_id": "blob:x", "query": "a"}, r"unknown argument\(s\) \['query'\]", id="unknown-arg"),
    ],
)
def test_json_bad_args(json_query: Skill, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        json_query(args)


# -- text.stats ----------------------------------------------------------------

SAMPLE_TEXT = (
    "Release notes\n"
    "\n"
    "The new importer reads CSV and JSON files. It is faster than the old importer!\n"
    "Large files are streamed, so memory use stays flat.\n"
)


def test_text_stats_of_a_blob(blobs: FakeBlobs, text_stats: Skill) -> None:
    out = text_stats({"blob_id": blobs.put(SAMPLE_TEXT), "top_n": 3})
    assert {k: out[k] for k in ("chars", "bytes", "lines", "blank_lines", "paragraphs", "sentences",
                                "words", "unique_words", "max_line_length")} == {
        "chars": 146, "bytes": 146, "lines": 4, "blank_lines": 1, "paragraphs": 2, "sentences": 4,
        "words": 26, "unique_words": 23, "max_line_length": 78,
    }
    assert (out["avg_word_length"], out["avg_sentence_words"]) == (4.42, 6.5)
    assert out["top_words"] == [["importer", 2], ["files", 2], ["release", 1]]
    assert "line_length_histogram" not in out
    assert out["summary"].startswith("26 words, 4 sentences, 4 lines; under a minute to read")


def test_text_inline_text_matches_blob(blobs: FakeBlobs, text_stats: Skill) -> None:
    from_blob = text_stats({"blob_id": blobs.put(SAMPLE_TEXT)})
    assert text_stats({"text": SAMPLE_TEXT}) == from_blob


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        pytest.param("", "The text is empty.", id="empty"),
        pytest.param(" \n\t\n", "The text has 4 characters but no words.", id="whitespace-only"),
        pytest.param("... !!! ---", "The text has 11 characters but no words.", id="punctuation-only"),
    ],
)
def test_text_without_words(text_stats: Skill, text: str, summary: str) -> None:
    out = text_stats({"text": text})
    assert (out["words"], out["sentences"], out["top_words"], out["avg_word_length"]) == (0, 0, [], 0.0)
    assert out["summary"] == summary


def test_text_unicode_counts_chars_not_bytes(text_stats: Skill) -> None:
    text = "Zoë's café serves crème brûlée. 東京 は 大きい"
    out = text_stats({"text": text})
    assert (out["chars"], out["bytes"]) == (len(text), len(text.encode("utf-8"))) == (40, 57)
    assert out["words"] == 8  # "Zoë's" is one word; CJK runs between spaces are words too
    assert out["sentences"] == 2


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("don't stop", ["don't", "stop"], id="apostrophe"),
        pytest.param("Don’t Stop", ["don't", "stop"], id="curly-apostrophe-folded"),
        pytest.param("well-known state-of-the-art", ["well-known", "state-of-the-art"], id="hyphenated"),
        pytest.param("pi is 3.14, about 1,000 times", ["pi", "is", "3.14", "about", "1,000", "times"],
                     id="numbers-with-separators"),
        pytest.param("snake_case -dash- 'quoted'", ["snake", "case", "dash", "quoted"], id="edges-are-not-words"),
    ],
)
def test_text_word_splitting(load_skill: Callable[[str], types.ModuleType], text: str, words: list[str]) -> None:
    module = load_skill("text.stats")
    assert [module.words.normalize(w) for w in module.words.find_words(text)] == words


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        pytest.param("One. Two! Three? Four", 4, id="terminators-and-unterminated-end"),
        pytest.param("Wait... what?!", 2, id="runs-of-punctuation"),
        pytest.param("Pi is 3.14 exactly.", 1, id="decimal-point"),
        pytest.param('He said "stop." Then left.', 2, id="closing-quote"),
        pytest.param("# Heading\n\nBody text here.", 2, id="blank-line-ends-heading"),
        pytest.param("line one\nline two", 1, id="single-newline-does-not"),
    ],
)
def test_text_sentence_counting(text_stats: Skill, text: str, sentences: int) -> None:
    assert text_stats({"text": text})["sentences"] == sentences


@pytest.mark.parametrize(
    ("text", "lines", "blank_lines", "max_line_length"),
    [
        pytest.param("a\nb\n", 2, 0, 1, id="trailing-newline"),
        pytest.param("a\nb", 2, 0, 1, id="no-trailing-newline"),
        pytest.param("abc\r\nde\r\n\r\n", 3, 1, 3, id="crlf"),
        pytest.param("\n", 1, 1, 0, id="one-empty-line"),
        pytest.param("a\u2028b\fc", 1, 0, 5, id="only-newline-breaks-lines"),
    ],
)
def test_text_line_counting(text_stats: Skill, text: str, lines: int, blank_lines: int, max_line_length: int) -> None:
    out = text_stats({"text": text})
    assert (out["lines"], out["blank_lines"], out["max_line_length"]) == (lines, blank_lines, max_line_length)


def test_text_stopwords_toggle(text_stats: Skill) -> None:
    text = "The cat and the dog and the bird. 2024 2024 2024 2024"
    assert text_stats({"text": text, "top_n": 2})["top_words"] == [["cat", 1], ["dog", 1]]
    out = text_stats({"text": text, "top_n": 2, "stopwords": False})
    assert out["top_words"] == [["the", 3], ["and", 2]]  # numbers are never top words
    assert out["stopwords_excluded"] is False and out["words"] == 12


def test_text_top_n_zero(text_stats: Skill) -> None:
    assert text_stats({"text": "alpha beta", "top_n": 0})["top_words"] == []


def test_text_reading_time(text_stats: Skill) -> None:
    out = text_stats({"text": "word " * 600, "words_per_minute": 200})
    assert (out["reading_time_minutes"], out["words_per_minute"]) == (3.0, 200)
    assert "about 3 min to read" in out["summary"]


def test_text_line_length_histogram(text_stats: Skill) -> None:
    text = "\n".join(["", "x" * 5, "x" * 20, "x" * 21, "x" * 250, "x" * 200]) + "\n"
    histogram = text_stats({"text": text, "histogram": True})["line_length_histogram"]
    assert histogram == {
        "0": 1, "1-20": 2, "21-40": 1, "41-60": 0, "61-80": 0, "81-100": 0, "101-120": 0,
        "121-140": 0, "141-160": 0, "161-180": 0, "181-200": 1, "201+": 1,
    }
    assert text_stats({"text": "", "histogram": True})["line_length_histogram"] == {}


def test_text_output_stays_small_with_long_words(text_stats: Skill) -> None:
    text = " ".join(("語" * 30 + str(i)) * (i + 1) for i in range(50))
    out = text_stats({"text": text, "top_n": 50, "stopwords": False})
    assert 0 < len(out["top_words"]) < 50
    assert all(len(word) <= 40 for word, _ in out["top_words"])


@pytest.mark.parametrize(
    ("data", "args", "chars"),
    [
        pytest.param("\ufeffhello".encode(), {}, 5, id="utf8-bom-dropped"),
        pytest.param("café".encode("latin-1"), {"encoding": "latin-1"}, 4, id="latin-1"),
        pytest.param("café".encode("utf-16"), {"encoding": "utf-16"}, 4, id="utf-16"),
    ],
)
def test_text_blob_encodings(blobs: FakeBlobs, text_stats: Skill, data: bytes, args: dict[str, Any],
                             chars: int) -> None:
    out = text_stats({"blob_id": blobs.put(data), **args})
    assert (out["chars"], out["bytes"]) == (chars, len(data))


def test_text_invalid_utf8_blob(blobs: FakeBlobs, text_stats: Skill) -> None:
    with pytest.raises(ValueError, match=r'not valid utf-8 text \(bad byte at 3\); pass "encoding"'):
        text_stats({"blob_id": blobs.put(b"caf\xe9")})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param({}, 'pass exactly one of "blob_id"', id="neither"),
        pytest.param({"blob_id": "blob:x", "text": "hi"}, 'pass exactly one of "blob_id"', id="both"),
        pytest.param({"text": 42}, '"text" must be a string, got int', id="text-not-string"),
        pytest.param({"blob_id": "x1"}, '"blob_id" must be a string like "blob:', id="blob-id-no-prefix"),
        pytest.param({"blob_id": "blob:missing"}, "not found or not mounted", id="blob-not-mounted"),
        pytest.param({"text": "a", "top_n": 100}, '"top_n" must be an integer from 0 to 50', id="top-n-too-big"),
        pytest.param({"text": "a", "top_n": 2.5}, '"top_n" must be an integer', id="top-n-float"),
        pytest.param({"text": "a", "stopwords": "no"}, '"stopwords" must be true or false', id="stopwords-string"),
        pytest.param({"text": "a", "histogram": 1}, '"histogram" must be true or false', id="histogram-int"),
        pytest.param({"text": "a", "words_per_minute": 0}, '"words_per_minute" must be an integer from 1',
                     id="wpm-zero"),
        pytest.param({"blob_id": "blob:x", "encoding": 8}, '"encoding" must be a string', id="encoding-int"),
        pytest.param({"text": "a", "lang": "en"}, r"unknown argument\(s\) \['lang'\]", id="unknown-arg"),
    ],
)
def test_text_bad_args(text_stats: Skill, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        text_stats(args)
