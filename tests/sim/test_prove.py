"""``epfabric prove`` (sim/flows/formal.py, sim/tb/formal/): formal properties really checked by SymbiYosys.

Every property CI runs (not marked ``slow``) is checked and must come out as
expected; the slow ones run under ``make test-slow``. Each block has a
deliberately broken variant that must make its property fail (the
negative controls), and the torn read's counterexample must land in the
waveform folder as a VCD + ``.gtkw`` whose marker sits on the failing cycle.
"""

import json
import os

import pytest

from epfabric.sim.cli import main
from epfabric.sim.flows.formal import missing_tool, registry, run_covers, run_property
from epfabric.sim.waves import read_dump, read_gtkw

from utils import require

PROPS = registry()

#: property → harness parameters of a broken variant that must fail it
BROKEN = {
    "ub_port.atomic": {"two_beat": True},
    "switch.order": {"drop_on_collision": True},
    "switch.response": {"bound": 3},          # one cycle tighter than the switch can do
    "link.rate": {"slack": 1},                 # one block more burst than claimed
    "link.latency": {"claim": 3},              # a cycle early
    "inc_engine.reduce3": {"duplicate": True},  # every reduced chunk sent twice
    "decoder.table": {"loose": True},          # opcode 0 accepted
    "router.acks": {"lose_restart": True},     # a store in its entry's ack cycle is lost
    "router.answers": {"ignore_entering": True},  # a load admitted into the space a UB answer takes
    "inc_switch.multicast_response": {"bound": 1},   # a copy takes more than a cycle
    "inc_switch.reduce": {"miscount": True},        # a sum that leaves input 0 out
    "inc_drain.absorb": {"bound": 6},               # tighter than the 8 cycles the unit needs
}


@pytest.fixture(autouse=True)
def _tools():
    require("formal tools", missing_tool())


def _params(slow):
    return [pytest.param(n, marks=pytest.mark.slow) if p.slow else n
            for n, p in PROPS.items() if p.slow == slow]


@pytest.mark.parametrize("name", _params(False) + _params(True))
def test_property_as_expected(name, tmp_path):
    o = run_property(name, PROPS[name], build=tmp_path / "b", waveforms=tmp_path / "w")
    want = "proved" if PROPS[name].expect == "pass" else "counterexample"
    assert o.result == want, (o.result, o.detail, (tmp_path / "b" / name / "sby.log").read_text())
    assert o.ok


@pytest.mark.parametrize("name", [n for n, p in PROPS.items() if p.expect == "pass" and not p.slow])
def test_covers_reached(name, tmp_path):
    """Non-vacuity: each harness's Cover statements are reachable within the property's depth."""
    reached, unreached = run_covers(name, PROPS[name], build=tmp_path / "b")
    assert reached >= 1 and unreached == 0


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_variant_fails_its_property(name, tmp_path):
    o = run_property(name, PROPS[name], build=tmp_path / "b", waveforms=tmp_path / "w",
                     overrides=BROKEN[name])
    assert o.result == "counterexample" and not o.ok
    assert os.path.exists(o.vcd)


def test_block_properties_are_unbounded():
    """Issue 33: the switch's, link's, INC engine's and router's CI properties are k-induction proofs."""
    for name, p in PROPS.items():
        if name.split(".")[0] in ("switch", "link", "inc_engine", "router") and not p.slow:
            assert p.mode == "prove", name


@pytest.mark.parametrize("name", ["switch.order", "switch.response", "inc_engine.reduce3",
                                  "router.acks", "router.answers"])
def test_induction_needs_the_invariants(name, tmp_path):
    """Without its invariants the induction step fails (unreachable start states): they carry the proof."""
    o = run_property(name, PROPS[name], build=tmp_path / "b", waveforms=tmp_path / "w",
                     overrides={"invariants": False})
    assert o.result == "unknown" and "UNKNOWN" in o.detail


@pytest.mark.parametrize("broken", [{"ignore_entering": True}, {"drop_on_stall": True}])
def test_router_answers_claim_catches_broken_routers(broken, tmp_path):
    """The claim alone (no invariants) has a counterexample from reset against each broken router.

    An over-admitted load's answer meets a full RSP queue (its negative control
    above fails on the reservation invariant first); an answer popped while
    ``tx`` is back-pressured never leaves.
    """
    o = run_property("router.answers", PROPS["router.answers"], depth=7, build=tmp_path / "b",
                     waveforms=tmp_path / "w", overrides={**broken, "invariants": False})
    assert o.result == "counterexample" and not o.ok


#: the bounded-response ("nothing starves") properties and their bound N (argued in each
#: harness's docstring): each proved by k-induction under a fairness assumption, with a
#: `_tight` (N - 1) and an `_unfair` (the fairness assumption dropped) variant that must each
#: give a counterexample (the answer path of the whole router has no `_tight`, and its
#: `_unfair` keeps the invariants: a BMC of the router deep enough for the claim is too slow)
RESPONSE = {"ub_port.response": 5, "link.response": 9, "switch.fair_response": 9,
            "router.ack_response": 8, "router.tx_response": 7, "router.answer_response": 11,
            "inc_engine.ag_response": 5}


@pytest.mark.parametrize("name", sorted(RESPONSE))
def test_bounded_response_has_its_negative_controls(name):
    claim, bound = PROPS[name], RESPONSE[name]
    assert claim.mode == "prove" and claim.expect == "pass"
    assert f"within {bound} cycles" in claim.doc
    assert claim.params.get("bound", bound) == bound
    controls = {"_unfair": {"bound": bound}}
    if name != "router.answer_response":
        controls["_tight"] = {"bound": bound - 1}
    for suffix, change in controls.items():
        other = PROPS[name + suffix]
        assert other.expect == "fail" and other.harness is claim.harness
        # the control checks the claim alone (no invariants), with one change
        assert other.params.get("invariants", True) is (name == "router.answer_response")
        assert all(other.params.get(k, v) == v for k, v in change.items())
        unfair = other.params.get("patience", 1) is None or other.params.get("unfair", False)
        assert unfair == (suffix == "_unfair")


@pytest.mark.parametrize("patience", [0, 1.5])
def test_fair_ready_rejects_a_bad_patience(patience):
    from amaranth.hdl import Signal
    from epfabric.sim.tb.formal.fairness import fair_ready
    with pytest.raises(ValueError, match=f"patience must be a positive integer or None, "
                                         f"not {patience}"):
        fair_ready(None, Signal(), patience=patience, name="x")


def test_every_block_has_a_negative_control():
    blocks = {n.split(".")[0] for n, p in PROPS.items() if p.expect == "pass"}
    assert blocks <= {n.split(".")[0] for n in BROKEN}


def test_torn_read_counterexample_waveform(tmp_path):
    o = run_property("ub_port.torn_read", PROPS["ub_port.torn_read"], build=tmp_path / "b",
                     waveforms=tmp_path / "w")
    assert o.result == "counterexample" and o.ok and o.step is not None
    assert o.vcd == str(tmp_path / "w" / "ub_port.torn_read.vcd")
    dump = read_dump(o.vcd)
    torn = [dump.find("obs0_torn"), dump.find("obs1_torn")]
    changes = dump.changes(torn)
    # the failing step shows a torn observer; no observer is torn before it
    at = [dump.value_at(v, 10 * o.step, changes) for v in torn]
    assert "1" in at
    before = [dump.value_at(v, 10 * (o.step - 1), changes) for v in torn]
    assert "1" not in before
    save = read_gtkw(o.gtkw)
    assert save.markers["A"] == save.primary == 10 * o.step
    assert any(t.endswith("obs0_torn") for t in save.traces)


def test_cli_json_and_exit_status(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EPFABRIC_FORMAL_DIR", str(tmp_path / "b"))
    monkeypatch.setenv("EPFABRIC_WAVEFORM_DIR", str(tmp_path / "w"))
    out = tmp_path / "out.json"
    assert main(["prove", "ub_port.atomic", "ub_port.torn_read", "--json", str(out)]) == 0
    rows = {r["name"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["ub_port.atomic"]["result"] == "proved"
    assert rows["ub_port.torn_read"]["result"] == "counterexample"
    assert rows["ub_port.torn_read"]["vcd"].endswith("ub_port.torn_read.vcd")
    text = capsys.readouterr().out
    assert "ub_port.atomic: proved" in text and "counterexample" in text
    # too shallow to reach the torn read: the expected counterexample is missing -> 1
    assert main(["prove", "ub_port.torn_read", "--depth", "1"]) == 1
    assert "NOT AS EXPECTED" in capsys.readouterr().out


def test_cli_selects_a_block_by_its_prefix():
    from epfabric.sim.cli.prove import select
    assert select(PROPS, ["ub_port"]) == [n for n in PROPS if n.startswith("ub_port.")]
    assert select(PROPS, ["ub_port.response"]) == ["ub_port.response"]
    assert "ub_port.response" not in select(PROPS, [], quick=True)


def test_cli_bad_input(capsys):
    assert main(["prove", "no_such_block"]) == 2
    assert "no property named 'no_such_block'" in capsys.readouterr().err
    assert main(["prove"]) == 2
    assert main(["prove", "ub_port", "--depth", "0"]) == 2
