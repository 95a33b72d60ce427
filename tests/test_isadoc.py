"""docs/isa.md is generated from hw/isa.py and must not drift from it."""
from pathlib import Path

from gen.cli import main
from gen.isadoc import isa_markdown
from hw.isa import FORMATS, Cause, Status

ROOT = Path(__file__).resolve().parent.parent


def test_isa_doc_is_up_to_date():
    doc = (ROOT / "docs" / "isa.md").read_text()
    assert doc == isa_markdown(), "docs/isa.md is stale: run `python -m gen isadoc`"


def test_isa_doc_names_every_field_status_and_cause():
    doc = isa_markdown()
    for op, fields in FORMATS.items():
        assert f"| 0x{int(op):02x} | {op.name} |" in doc
        for f in fields:
            assert f"{f.name} [{f.lsb}+:{f.width}]" in doc
            assert f"[{f.lsb + f.width - 1:3}:{f.lsb:3}] {f.name}" in doc
    for s in Status:
        assert f"| {int(s)} | `{s.name}` |" in doc
    for c in Cause:
        assert f"| {int(c)} | `{c.name}` |" in doc


def test_isadoc_command_writes_and_checks(tmp_path):
    out = tmp_path / "isa.md"
    assert main(["isadoc", "--check", "-o", str(out)]) == 1      # missing: stale
    assert not out.exists()
    assert main(["isadoc", "-o", str(out)]) == 0
    assert out.read_text() == isa_markdown()
    assert main(["isadoc", "--check", "-o", str(out)]) == 0
    out.write_text(out.read_text().replace("COPY", "KOPY", 1))
    assert main(["isadoc", "--check", "-o", str(out)]) == 1
