"""Where every timing parameter of the UBEP experiments comes from: the table and its page.

The table is data, ``sw/fits/provenance.toml`` (:data:`PATH`): one row per preset field,
die knob, machine field, kernel parameter or default, hardware constant and experiment
setting the UBEP experiments read, each with its value as the code has it, the category of
its source (paper, training, prior, doc, shape, choice, none), the source's text, a prior's
bounds and their sources, and ``held_out_sources``: the held-out items the source cites
today. The same file holds the one list of held-out item ids and of training targets
(the preregistration's sections 6 and 4, docs/fidelity/preregistration.md).

``tests/sw/test_provenance.py`` holds the table to the code (every field and knob has a
row, every row's value is the code's), to the fit (its targets are exactly the training
ids) and to the held-out list (the rows citing a held-out item are exactly the known
leaks). :mod:`epfabric.sim.lab.provenance_page` renders it to docs/fidelity/provenance.md
(``epfabric pages``).
"""

import re
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:            # Python < 3.11
    import tomli as tomllib

__all__ = ["PATH", "load", "held_out_ids", "training_ids", "rows", "mentioned", "leaks"]

#: the table
PATH = Path(__file__).resolve().parent / "fits" / "provenance.toml"


@lru_cache(maxsize=4)
def _load(path):
    with open(path, "rb") as f:
        return tomllib.load(f)


def load(path=None):
    """The table as a dict (``presets``, ``categories``, ``held_out``, ``training``, ``row``)."""
    return _load(str(path or PATH))


def held_out_ids(doc=None, counted=None):
    """The held-out item ids, in order; ``counted=True``: only the preregistration's nine
    judged items, ``False``: only its additional ones."""
    return tuple(h["id"] for h in (doc or load())["held_out"]
                 if counted is None or h["counted"] == counted)


def training_ids(doc=None):
    """The training target ids (F1-F5), in order."""
    return tuple(t["id"] for t in (doc or load())["training"])


def rows(doc=None, kind=None):
    """The rows (of ``kind`` only, when given)."""
    return [r for r in (doc or load())["row"] if kind is None or r["kind"] == kind]


def mentioned(text, doc=None):
    """The held-out ids whose patterns occur in ``text``."""
    return {h["id"] for h in (doc or load())["held_out"]
            if any(re.search(p, text) for p in h["patterns"])}


def leaks(doc=None):
    """``{row name: its held-out sources}`` of every row whose source cites a held-out item."""
    return {r["name"]: list(r["held_out_sources"]) for r in rows(doc) if r["held_out_sources"]}
