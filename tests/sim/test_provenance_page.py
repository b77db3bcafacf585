"""docs/fidelity/provenance.md (sim/lab/provenance_page.py) is the provenance table's render."""

from pathlib import Path

import pytest

from epfabric.sim.lab import provenance_page
from epfabric.sw import provenance

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_page_is_the_render():
    page = ROOT / "docs" / provenance_page.PAGE
    assert page.read_text() == provenance_page.render(), (
        f"{page.relative_to(ROOT)} is not what sw/fits/provenance.toml gives: run `epfabric pages`")


def test_the_page_shows_every_row_and_its_leaks():
    text = provenance_page.render()
    for r in provenance.rows():
        assert f"`{r['name']}`" in text
    leaks = text[text.index("## Rows that cite"):text.index("## Categories")]
    assert set(provenance.leaks()) and all(f"`{name}`" in leaks for name in provenance.leaks())


def test_a_row_of_an_unknown_kind_is_refused():
    doc = {**provenance.load(), "row": [*provenance.load()["row"], {"kind": "nosuch", "name": "x"}]}
    with pytest.raises(ValueError, match="row kinds without a section: nosuch"):
        provenance_page.render(doc)
