"""docs/concepts/own-superpod.md's field table is every field a machine file takes, as
sw/preset_file.py reads it (name, unit, what it takes, cm384's value, help)."""

import typing
from dataclasses import fields
from pathlib import Path

from epfabric.sw.param import params_of
from epfabric.sw.presets import Preset, get_preset

PAGE = Path(__file__).resolve().parent.parent / "docs" / "concepts" / "own-superpod.md"
HEAD = ("| field | unit | takes | cm384 | what it is |\n"
        "|---|---|---|---|---|\n")


def field_table():
    """The page's table, from the preset's declarations (every field but ``name``)."""
    optional = {f.name: type(None) in typing.get_args(f.type) for f in fields(Preset)}
    cm384 = get_preset("cm384")
    rows = []
    for p in params_of(Preset):
        if p.name == "name":
            continue
        kind = {int: "integer", float: "number", bool: "true or false", str: "string"}[p.type]
        if p.choices:
            kind = " or ".join(f"`{c}`" for c in p.choices)
        elif p.type in (int, float) and (p.minimum is not None or p.maximum is not None
                                         or p.positive):
            kind += ", " + p.range_text().removesuffix(f" {p.unit}" if p.unit else "")
        if optional[p.name]:
            kind += ", or `\"none\"`"
        value = getattr(cm384, p.name)
        shown = "none" if value is None else str(value).lower() if p.type is bool else value
        if p.name == "description":
            shown = "…"
        rows.append(f"| `{p.name}` | {p.unit or ''} | {kind} | {shown} | "
                    f"{p.help.replace('|', '/')} |")
    return HEAD + "\n".join(rows) + "\n"


def test_the_field_table_is_every_field():
    text = PAGE.read_text(encoding="utf-8")
    assert field_table() in text, ("docs/concepts/own-superpod.md's field table differs from "
                                   "the preset's fields; paste tests/test_superpod_page.py's "
                                   "field_table():\n" + field_table())


def test_the_check_sees_a_missing_field():
    table = field_table()
    first = table.splitlines()[2]
    assert table.replace(first + "\n", "") not in table
