"""docs/benchmarks.md is bench/report.py's tables followed by bench/notes.md, the hand-written analysis. A section
written into the doc alone would be lost at the next `make bench`; one written into the notes alone would not show."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIRST_NOTE = "## How these were measured"


def test_the_benchmarks_doc_ends_with_the_notes_as_written() -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    notes = (ROOT / "bench" / "notes.md").read_text()
    assert notes.startswith(FIRST_NOTE)
    assert FIRST_NOTE in doc
    assert doc[doc.index(FIRST_NOTE) :] == notes, "edit bench/notes.md and the same text in docs/benchmarks.md"


def test_the_generated_figures_name_the_checkout_they_were_measured_at() -> None:
    doc = (ROOT / "docs" / "benchmarks.md").read_text()
    assert re.search(r"^Measured at \S*[0-9a-f]{7,}\S* ", doc, re.MULTILINE), "make bench writes bench/out/REVISION"
