"""The provenance table (sw/fits/provenance.toml, epfabric.sw.provenance) is the code's.

* **Complete and true**: every field of ``Preset`` and ``MachineConfig``, every die knob and
  every parameter of the kernels the UBEP experiments run has a row, and every row names
  something that exists, with the value the code has (per preset for a preset field or a
  knob), so the table cannot drift from the code.
* **Known leaks only**: the rows whose source cites a held-out item are exactly
  :data:`KNOWN_LEAKS`; every held-out item a row's text (or the code's own text for it: a
  parameter's help, the fit's basis) names is declared as its source or as a mention.
* **The fit's targets are the preregistered ones**: the training set the fit uses is
  exactly the table's F1-F5, which are the preregistration's section 4, and the held-out
  ids are its section 6 (and the validation's items).

Each check is a function returning its problems, so the last test plants a failure in each.
"""

import copy
import importlib
import inspect
import json
import math
import re
from dataclasses import MISSING, fields, is_dataclass
from pathlib import Path

from epfabric.hw.die import KNOBS
from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sw import provenance
from epfabric.sw.config import MachineConfig
from epfabric.sw.kernels import KERNELS
from epfabric.sw.param import Param, params_of
from epfabric.sw.presets import FITS, PRESETS, Preset

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: the experiments of the UBEP paper and of the calibration
UBEP_EXPERIMENTS = ("table4", "training", "fig3b", "fig7a", "fig7b", "fig7c", "fig13", "fig8",
                    "fig9", "fig10", "fig14", "validation", "mechanisms")
#: the kernels they run (the test below finds them in their modules and their shared runner's)
UBEP_KERNELS = ("dispatch", "daf")

#: Rows whose source cites a held-out item today (docs/fidelity/preregistration.md section 9):
#: the fit's priors of the window (Table 4, Fig. 9), the injection (Fig. 3b) and the read
#: start (Table 4, Fig. 9, Fig. 10), the knobs made from them, and UBEP's default CalCumSum
#: group size, whose 3 was fitted to Fig. 14's best-C cells (the dispatch's and fig9's unset
#: C take it; fig14's reference line is drawn from it). ``poll_extra`` is the read start's leak
#: again, not a new source: the scalar reads' knob takes ``read_start_ns`` while no preset
#: names its own ``poll_ns`` (M1 built, not yet fitted apart). This list may only shrink: a new row citing a held-out item fails the test, and
#: a row that stops citing one fails it until it is taken off here. The refit that
#: docs/fidelity/preregistration.md preregisters must empty it; then no row cites a held-out
#: item and this test is the rule "no source is a held-out item".
KNOWN_LEAKS = {
    "send_window_bytes": ["table4", "fig9"],
    "store_window": ["table4", "fig9"],
    "die_injection_gbytes_s": ["fig3b"],
    "inject_rate": ["fig3b"],
    "read_start_ns": ["table4", "fig9", "fig10"],
    "read_extra": ["table4", "fig9", "fig10"],
    "poll_extra": ["table4", "fig9", "fig10"],
    "dispatch.cumsum_aivs": ["fig14"],
    "fig9.cumsum_aivs": ["fig14"],
    "default_cumsum_aivs": ["fig14"],
    "fig14 reference": ["fig14"],
}

REQUIRED = {"name", "kind", "where", "category", "source", "held_out_sources"}
OPTIONAL = {"value", "values", "calls", "value_not_checked", "effective", "effective_where",
            "unit", "prior", "bounds", "bound_sources", "prior_source", "mentions",
            "derived_from", "round1"}


def table():
    """A fresh copy of the table (a test may edit it)."""
    return copy.deepcopy(provenance.load())


# ----------------------------------------------------------------------------- resolving

STEP = re.compile(r"\.(\w+)|\[([^\]]+)\]|\((\w+)\)")


def resolve(where):
    """The object ``module:path`` names; ``.attr`` (a dataclass field without a default gives
    ``MISSING``), ``[key]`` (a dict's key, the entry named ``key`` of a list of named
    objects, an index), ``(param)`` (a callable's keyword default). ``LookupError`` if not."""
    module, _, path = where.partition(":")
    head = re.match(r"\w+", path)
    obj = getattr(importlib.import_module(module), head.group())
    rest = path[head.end():]
    pos = 0
    for m in STEP.finditer(rest):
        if m.start() != pos:
            raise LookupError(f"{where}: cannot read {rest[pos:]!r}")
        pos = m.end()
        attr, key, param = m.groups()
        if attr is not None:
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif is_dataclass(obj) and attr in {f.name for f in fields(obj)}:
                obj = MISSING
            else:
                raise LookupError(f"{where}: no attribute {attr!r}")
        elif key is not None:
            if isinstance(obj, dict):
                obj = obj[key]
            elif key.isdigit():
                obj = obj[int(key)]
            else:
                named = [x for x in obj if getattr(x, "name", None) == key]
                if len(named) != 1:
                    raise LookupError(f"{where}: no entry named {key!r}")
                obj = named[0]
        else:
            obj = inspect.signature(obj).parameters[param].default
    if pos != len(rest):
        raise LookupError(f"{where}: cannot read {rest[pos:]!r}")
    return obj


def plain(value):
    """``value`` as TOML holds it: tuples as lists."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def same(a, b):
    """``a`` and ``b`` are the same value (numbers to rounding, tuples as lists)."""
    a, b = plain(a), plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


# ----------------------------------------------------------------------------- checks

def shape_problems(doc):
    """Rows with unknown keys, missing keys, unknown categories or held-out ids, twice a name."""
    problems, seen = [], set()
    ids = set(provenance.held_out_ids(doc))
    for r in doc["row"]:
        name = r.get("name", "?")
        if name in seen:
            problems.append(f"{name}: named twice")
        seen.add(name)
        if REQUIRED - set(r) or set(r) - REQUIRED - OPTIONAL:
            problems.append(f"{name}: missing {sorted(REQUIRED - set(r))}, unknown "
                            f"{sorted(set(r) - REQUIRED - OPTIONAL)}")
            continue
        if r["category"] not in doc["categories"]:
            problems.append(f"{name}: category {r['category']!r}")
        cited = set(r["held_out_sources"]) | set(r.get("mentions", {}))
        if cited - ids:
            problems.append(f"{name}: unknown held-out ids {sorted(cited - ids)}")
        if "prior" in r and not (len(r.get("bounds", ())) == 2 and r["bounds"][0] <= r["prior"]
                                 <= r["bounds"][1] and len(r.get("bound_sources", ())) == 2
                                 and r.get("prior_source")):
            problems.append(f"{name}: a prior needs its two bounds, their sources and its own")
        if "bounds" in r and not (len(r["bounds"]) == 2 and r["bounds"][0] <= r["bounds"][1]
                                  and len(r.get("bound_sources", ())) == 2):
            problems.append(f"{name}: bounds need their two sources")
        if r.get("derived_from") and r["derived_from"] not in {x["name"] for x in doc["row"]}:
            problems.append(f"{name}: derived from {r['derived_from']!r}, which has no row")
    return problems


def completeness_problems(doc):
    """Fields, knobs and kernel parameters without a row (``where`` names them)."""
    named = {r["where"] for r in doc["row"]}
    want = [f"epfabric.sw.presets:Preset.{f.name}" for f in fields(Preset)]
    want += [f"epfabric.hw.die:KNOBS[{k}]" for k in KNOBS]
    want += [f"epfabric.sw.config:MachineConfig.{f.name}" for f in fields(MachineConfig)]
    for name in UBEP_KERNELS:
        cls = type(KERNELS[name])
        want += [f"{cls.__module__}:{cls.__name__}.params[{p.name}]" for p in cls.params]
    for name in UBEP_EXPERIMENTS:
        want += [f"epfabric.sim.lab.experiments:EXPERIMENTS[{name}].params[{p.name}]"
                 for p in EXPERIMENTS[name].params]
    return [f"no row names {w}" for w in want if w not in named]


def value_problems(doc):
    """Rows whose ``where`` names nothing or whose value is not the code's."""
    problems = []
    for r in doc["row"]:
        name = r["name"]
        try:
            obj = resolve(r["where"])
        except (LookupError, ImportError, AttributeError, KeyError, IndexError) as e:
            problems.append(f"{name}: {e!r}")
            continue
        if r["kind"] == "preset field":
            field = r["where"].rpartition(".")[2]
            for p in doc["presets"]:
                code = None if "value_not_checked" in r else getattr(PRESETS[p], field)
                if not same(r.get("values", {}).get(p), code):
                    problems.append(f"{name}: {p} has {code!r}, the table "
                                    f"{r.get('values', {}).get(p)!r}")
        elif r["kind"] == "knob":
            knob = re.search(r"\[(\w+)\]$", r["where"]).group(1)
            for p in doc["presets"]:
                code = PRESETS[p].knobs().get(knob, "reset")
                if not same(r["values"].get(p), code):
                    problems.append(f"{name}: {p} sets {code!r}, the table {r['values'].get(p)!r}")
        elif "calls" in r:
            for *args, result in r["calls"]:
                got = obj(*args)
                if not same(float(got), float(result)):
                    problems.append(f"{name}: {r['where']}{tuple(args)} is {got!r}, the table "
                                    f"{result!r}")
        else:
            code = obj.default if isinstance(obj, Param) else obj
            if not same(r.get("value"), code):
                problems.append(f"{name}: the code has {code!r}, the table {r.get('value')!r}")
        if "effective_where" in r:
            try:
                default = resolve(r["effective_where"])
            except (LookupError, ImportError, AttributeError, KeyError, IndexError) as e:
                problems.append(f"{name}: {e!r}")
                continue
            if not callable(default) and not same(r["effective"], default):
                problems.append(f"{name}: unset means {default!r}, the table {r['effective']!r}")
    return problems


def code_text(row):
    """What the code itself says about a row's value: a parameter's help, the fit's basis."""
    from epfabric.sim.lab.fit import PARAMS
    text = []
    if row["kind"] == "preset field":
        text += [p.help for p in params_of(Preset) if p.name == row["where"].rpartition(".")[2]]
    else:
        try:
            obj = resolve(row["where"])
        except (LookupError, ImportError, AttributeError, KeyError, IndexError):
            obj = None
        if isinstance(obj, Param):
            text.append(obj.help)
    text += [p.basis for p in PARAMS if row["kind"] == "preset field"
             and p.field == row["name"]]
    return " ".join(text)


def citation_problems(doc, code=code_text):
    """Held-out items a row's text or its code's text names but does not declare (as a
    source or a mention), mentions nothing names, and derived rows that drop their source's
    held-out items."""
    problems = []
    by_name = {r["name"]: r for r in doc["row"]}
    for r in doc["row"]:
        words = [r["source"], r.get("prior_source", ""), *r.get("bound_sources", ()),
                 r.get("effective", ""), code(r)]
        named = provenance.mentioned(" ".join(words), doc)
        declared = set(r["held_out_sources"]) | set(r.get("mentions", {}))
        if named - declared:
            problems.append(f"{r['name']}: names {sorted(named - declared)} without declaring them")
        stale = set(r.get("mentions", {})) - named
        if stale:
            problems.append(f"{r['name']}: mentions {sorted(stale)}, which its text does not name")
        parent = by_name.get(r.get("derived_from"))
        if parent and set(parent["held_out_sources"]) - set(r["held_out_sources"]):
            problems.append(f"{r['name']}: derived from {parent['name']} but drops its held-out "
                            f"sources {sorted(set(parent['held_out_sources']) - set(r['held_out_sources']))}")
    return problems


def leak_problems(doc, known=KNOWN_LEAKS):
    """The rows citing a held-out item that are not :data:`KNOWN_LEAKS`, and known leaks that
    are gone or changed."""
    got = provenance.leaks(doc)
    return ([f"{n} cites {got[n]} (a new leak)" for n in got if n not in known]
            + [f"{n}: was {known[n]}, now {got.get(n, [])} (shrink KNOWN_LEAKS)"
               for n in known if sorted(got.get(n, [])) != sorted(known[n])])


def section(text, number):
    """The lines of section ``number`` (``## 4.``) of the preregistration."""
    start = text.index(f"\n## {number}. ")
    return text[start:text.index("\n## ", start + 1)]


def preregistered_problems(doc, prereg=None):
    """Training and held-out ids that differ from the preregistration's sections 4 and 6."""
    text = prereg if prereg is not None else (DOCS / "fidelity" / "preregistration.md").read_text()
    trained = re.findall(r"^\| (F\d) \|", section(text, 4), re.M)
    held = re.findall(r"^\| \*\*(\w+)\*\* \|", section(text, 6), re.M)
    problems = []
    if trained != list(provenance.training_ids(doc)):
        problems.append(f"training targets: preregistration {trained}, table "
                        f"{list(provenance.training_ids(doc))}")
    if held != list(provenance.held_out_ids(doc, counted=True)):
        problems.append(f"held-out items: preregistration {held}, table "
                        f"{list(provenance.held_out_ids(doc, counted=True))}")
    return problems


def fit_problems(doc):
    """The fit's targets and parameters against the table: the targets exactly F1-F5 with the
    table's values (the fit's ORDER, the training experiment's TARGETS, the recorded fit's),
    and the fitted fields exactly the rows with a prior, at the fit's priors and bounds."""
    from epfabric.sim.lab import fit
    from epfabric.sim.lab.experiments.training import TARGETS
    recorded = json.loads((FITS / "cm384.json").read_text())["provenance"]
    ids = list(provenance.training_ids(doc))
    problems = []
    for what, got in (("fit.ORDER", list(fit.ORDER)), ("training.TARGETS", list(TARGETS)),
                      ("cm384.json targets", list(recorded["targets"]))):
        if got != ids:
            problems.append(f"{what} is {got}, the preregistered targets {ids}")
    for t in doc["training"]:
        for what, value in (("training.TARGETS", TARGETS.get(t["id"], (None,))[0]),
                            ("cm384.json", recorded["targets"].get(t["id"], {}).get("paper"))):
            if value is None or not math.isclose(value, t["value"], rel_tol=1e-9):
                problems.append(f"{t['id']}: {what} has {value!r}, the table {t['value']!r}")
    priors = {r["name"]: r for r in doc["row"] if "prior" in r}
    fitted = {p.field: p for p in fit.PARAMS}
    if set(priors) != set(fitted):
        problems.append(f"rows with a prior {sorted(priors)}, fitted {sorted(fitted)}")
    for name in set(priors) & set(fitted):
        r, p = priors[name], fitted[name]
        if [r["prior"], *r["bounds"]] != [p.prior, p.lo, p.hi]:
            problems.append(f"{name}: fit prior {p.prior}, bounds [{p.lo}, {p.hi}]; table "
                            f"{r['prior']}, {r['bounds']}")
        if recorded["basis"].get(name) != p.basis or recorded["priors"].get(name) != p.prior:
            problems.append(f"{name}: sw/fits/cm384.json's recorded basis or prior is not the "
                            f"fit's (refit or correct the record)")
    return problems


# ----------------------------------------------------------------------------- tests

def test_every_row_is_well_formed():
    assert not shape_problems(table())


def test_every_field_knob_and_kernel_parameter_has_a_row():
    assert not completeness_problems(table())


def test_every_row_names_what_exists_with_the_codes_value():
    problems = value_problems(table())
    assert not problems, "the table drifted from the code:\n" + "\n".join(problems)


def test_the_ubep_experiments_run_only_the_kernels_the_table_covers():
    from epfabric.sim.lab.experiments import ubep_runs
    modules = {importlib.import_module(type(EXPERIMENTS[n]).__module__) for n in UBEP_EXPERIMENTS}
    found = set()
    for module in modules | {ubep_runs}:
        found |= set(re.findall(r"KERNELS\[\"(\w+)\"\]", Path(module.__file__).read_text()))
    assert found == set(UBEP_KERNELS)


def test_the_rows_citing_held_out_items_are_exactly_the_known_leaks():
    """The preregistered refit must empty :data:`KNOWN_LEAKS`; until then it may only shrink."""
    problems = leak_problems(table())
    assert not problems, "\n".join(problems)


def test_every_held_out_item_a_row_names_is_declared():
    problems = citation_problems(table())
    assert not problems, "\n".join(problems)


def test_the_fits_targets_and_parameters_are_the_preregistered_ones():
    problems = fit_problems(table())
    assert not problems, "\n".join(problems)


def test_the_ids_are_the_preregistrations_and_the_validations():
    from epfabric.sim.lab.experiments.validation import ITEMS
    doc = table()
    assert not preregistered_problems(doc)
    assert list(ITEMS) == list(provenance.held_out_ids(doc, counted=True))
    assert set(provenance.held_out_ids(doc)) > set(ITEMS)


def test_the_checks_see_planted_failures():
    doc = table()
    row = next(r for r in doc["row"] if r["name"] == "latency_one_hop_ns")
    row["values"]["cm384-fit"] = 930.0                         # a value that drifted
    row["source"] += "; the hop read from Fig. 9"               # an undeclared citation
    assert any(p.startswith("latency_one_hop_ns: cm384-fit has 929.0") for p in value_problems(doc))
    assert ["latency_one_hop_ns: names ['fig9'] without declaring them"] == [
        p for p in citation_problems(doc, code=lambda r: "") if "latency_one_hop" in p]
    row["held_out_sources"] = ["fig9"]                           # declared: a new leak
    assert leak_problems(doc) == ["latency_one_hop_ns cites ['fig9'] (a new leak)"]
    knob = next(r for r in doc["row"] if r["name"] == "read_extra")
    knob["held_out_sources"] = []                               # a derived row drops its source
    assert any("read_extra: derived from read_start_ns" in p
               for p in citation_problems(doc, code=lambda r: ""))
    assert "read_extra: was ['table4', 'fig9', 'fig10'], now [] (shrink KNOWN_LEAKS)" in \
        leak_problems(doc)
    doc["row"] = [r for r in doc["row"] if r["name"] != "boards"]   # a field without a row
    assert completeness_problems(doc) == ["no row names epfabric.sw.presets:Preset.boards"]
    doc["training"] = doc["training"][:4]                       # a target dropped
    assert any("F1', 'F2', 'F3', 'F4']" in p for p in fit_problems(doc))
    assert preregistered_problems(doc)
    assert preregistered_problems(table(), "\n## 4. x\n| F1 | 103 |\n\n## 6. y\n"
                                           "| **fig9** |\n\n## 7. z\n")
    assert resolve("epfabric.sw.ubep.ubep:MAPPINGS[0]") == "transpose"
    assert resolve("epfabric.hw.system:System.__init__(hbm_latency)") == 2
