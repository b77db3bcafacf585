"""Presets: names, validation, and the one place where units become cycles."""

import dataclasses
from fractions import Fraction

import pytest

from epfabric.hw.link import LINK_MIN_LATENCY
from epfabric.hw.switch import SWITCH_LATENCY
from epfabric.sw.param import params_of
from epfabric.sw.presets import CLASSES, PRESETS, Preset, get_preset


def test_names_and_unknown_preset():
    assert {"cm384", "incmoe-testbed", "tiny"} <= set(PRESETS)
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; valid presets: cm384, incmoe-testbed, tiny"):
        get_preset("nope")
    assert get_preset(PRESETS["tiny"]) is PRESETS["tiny"]


def test_every_field_is_a_param_with_help():
    """Every field is declared by sw.param.param: its Param, named, with a help text and the
    field's default."""
    params = params_of(Preset)
    assert [p.name for p in params] == [f.name for f in dataclasses.fields(Preset)]
    for p, f in zip(params, dataclasses.fields(Preset)):
        assert p.help, p.name
        assert p.default == (None if f.default is dataclasses.MISSING else f.default), p.name


def test_cm384_figures():
    p = get_preset("cm384")
    assert (p.dies_per_npu, p.npus_per_board, p.boards, p.aivs_per_die) == (2, 8, 16, 48)
    assert p.latency_ns() == {"intra": 218.0, "one_hop": 929.0, "two_hop": 2500.0}
    assert p.bytes_per_cycle() == 392 and p.rate() == (392, 1)
    assert (p.block_bytes, p.data_bytes, p.cycle_ns) == (512, 64, 1.0)


def test_incmoe_testbed_is_100_gbit_per_direction():
    p = get_preset("incmoe-testbed")
    assert p.topology == "star" and p.full_duplex
    assert p.bandwidth_gbits_s == 100.0
    assert p.rate() == (25, 2)          # 12.5 bytes per 1 ns cycle
    assert p.classes() == ("one_hop",)


@pytest.mark.parametrize("name", list(PRESETS))
def test_hops_sum_to_class_latency(name):
    p = get_preset(name)
    h, lat, S = p.hop_cycles(), p.latency_cycles(), SWITCH_LATENCY
    assert all(v >= LINK_MIN_LATENCY for v in h.values())
    if p.topology == "superpod":
        assert 2 * S + h["direct"] == lat["intra"]
        assert 3 * S + h["up"] + h["down"] == lat["one_hop"]
        assert 5 * S + h["up"] + h["t2_up"] + h["t2_down"] + h["down"] == lat["two_hop"]
    star = p.hop_cycles("star")
    assert star["up"] + S + star["down"] == lat["one_hop"]


def test_cycle_ns_converts_in_one_place():
    p = get_preset("cm384").replace(cycle_ns=2.0)
    assert p.latency_cycles() == {"intra": 109, "one_hop": 464, "two_hop": 1250}
    assert p.bytes_per_cycle() == Fraction(784)
    assert p.gbytes_s(784 * 10, 10) == pytest.approx(392.0)
    assert p.ns(5) == 10.0


@pytest.mark.parametrize("change, exc, match", [
    ({"boards": 0}, ValueError, r"^boards must be >= 1, not 0$"),
    ({"dies_per_npu": 1.5}, TypeError, r"^dies_per_npu must be an integer, not 1.5$"),
    ({"bandwidth_gbytes_s": -1}, ValueError, r"bandwidth_gbytes_s must be a positive number, not -1"),
    ({"cycle_ns": 0}, ValueError, r"cycle_ns must be a positive number, not 0"),
    ({"block_bytes": 500}, ValueError, r"block_bytes must be a power of two, not 500"),
    ({"data_bytes": 8}, ValueError,
     r"data_bytes must be between flag_bytes \(32\) and block_bytes \(512\), not 8"),
    ({"topology": "ring"}, ValueError, r"topology must be one of superpod, star, not 'ring'"),
    ({"latency_intra_ns": 1000.0}, ValueError, r"latencies must grow with distance"),
    ({"latency_intra_ns": 3.0}, ValueError,
     r"latency_intra_ns=3.0 is 3 cycles, shorter than the 6 cycles"),
    ({"latency_two_hop_ns": None}, TypeError, r"^latency_two_hop_ns must be a number, not None$"),
    ({"full_duplex": False}, ValueError, r"full_duplex=False is not modelled"),
    ({"full_duplex": 1}, TypeError, r"^full_duplex must be a bool, not 1$"),
    ({"name": ""}, ValueError, r"^name must be a non-empty string, not ''$"),
])
def test_validation_names_the_field(change, exc, match):
    """Wrong type: TypeError; right type out of range: ValueError (hw/validate.py)."""
    with pytest.raises(exc, match=match):
        get_preset("cm384").replace(**change)


def test_fabric_timing_and_shape_maxima():
    p = get_preset("tiny")
    timing = p.fabric_timing()
    assert timing.hops == p.hop_cycles() and (timing.rate_num, timing.rate_den) == p.rate()
    assert timing.block_bytes == p.block_bytes
    assert p.fabric_timing("star").hops == p.hop_cycles("star")
    p.check_shape(2, 2, 2)
    with pytest.raises(ValueError, match=r"^boards must be in \[1, 2\], not 3$"):
        p.check_shape(2, 2, 3)


def test_star_preset_cannot_build_superpod():
    with pytest.raises(ValueError, match=r"preset 'incmoe-testbed' has no intra-NPU and two-hop"):
        get_preset("incmoe-testbed").hop_cycles("superpod")


def test_classes():
    assert get_preset("tiny").classes() == CLASSES
