"""The UBEP figures' trends on their quick grids (slow: 8-die Verilator runs, minutes each).

Each test runs an experiment's ``--quick`` grid and checks what docs/results.md's
table reports for it: where the paper's trend holds in the model, the
trend; where it does not, the measured reason docs/results.md gives. CI runs
the smoke versions in ``test_ubep_runs.py``.
"""

import pytest

from epfabric.sim.lab.experiments import EXPERIMENTS
from epfabric.sim.lab.reproduce import reproduce_one
from utils import require_simulator

pytestmark = pytest.mark.slow


def quick(name, tmp_path):
    require_simulator("verilator")
    doc = reproduce_one(EXPERIMENTS[name], tmp_path, quick=True, log=lambda *a: None)
    assert not doc["errors"], doc["errors"]
    assert (tmp_path / f"{name}.png").exists() and (tmp_path / f"{name}.csv").exists()
    return doc


def by(rows, key):
    return sorted(rows, key=lambda r: r[key])


def test_fig3b_efficiency_falls_with_the_number_of_senders(tmp_path):
    """The trend holds; the verdict also holds each efficiency to the paper's ± 10 points,
    which the quick grid (98.3 / 96.5 / 79.6 / 70.1 % against 76.7 / 57.6 / 45.6 / 31.1 %,
    docs/results.md) does not meet: not pinned here."""
    doc = quick("fig3b", tmp_path)
    rows = by(doc["rows"], "senders")
    assert "falls with n" in doc["verdict"] and "does NOT fall" not in doc["verdict"]
    assert rows[0]["eff"] == 1.0
    assert all(a["eff"] > b["eff"] for a, b in zip(rows, rows[1:]))
    assert rows[-1]["eff"] < 0.8            # the link saturates (paper 31 % at 48 AIVs)


def test_fig7a_ubep_wins_and_cann_sending_grows_faster_with_the_batch(tmp_path):
    """UBEP is faster at every batch size. The paper's improvement falls at BS 128; here it
    rises, because CANN's per-slot prefix count makes its own sending superlinear in BS."""
    rows = by(quick("fig7a", tmp_path)["rows"], "batch")
    assert all(r["improvement"] > 0 for r in rows)
    first, last = rows[0], rows[-1]
    assert last["cann_a2a"] / first["cann_a2a"] > last["ubep_a2a"] / first["ubep_a2a"]
    assert last["cann_a2a"] > last["ubep_a2a"]


def test_fig7b_the_improvement_falls_at_the_largest_rank_count(tmp_path):
    """The trend holds; the verdict also holds the mean improvement to the paper's 43.9 % ± 10
    points, which the quick grid (21.7 / 15.4 %, docs/results.md) does not meet: not pinned."""
    doc = quick("fig7b", tmp_path)
    rows = by(doc["rows"], "ranks")
    assert "(falls;" in doc["verdict"]
    assert rows[-1]["improvement"] < rows[0]["improvement"]


def test_fig7c_cann_spends_a_larger_share_on_synchronisation(tmp_path):
    """CANN's share is the larger; the verdict also holds the improvement to 38.6-41.9 % and
    the shares to ≈70 / ≈30 %, each ± 10 points, which the quick grid (19.9 / 15.4 %, shares
    49 / 39 %, docs/results.md) does not meet: not pinned here."""
    doc = quick("fig7c", tmp_path)
    assert "CANN's larger at every point" in doc["verdict"]
    assert all(r["cann_sync_share"] > r["ubep_sync_share"] for r in doc["rows"])


def test_fig8_calcumsum_hides_under_token_sending(tmp_path):
    doc = quick("fig8", tmp_path)
    for batch in {r["batch"] for r in doc["rows"]}:
        ubep = [r for r in doc["rows"] if r["batch"] == batch and r["system"] == "ubep"]
        send_end = max(r["init"] + r["sending"] for r in ubep if r["role"] == "T")
        cumsum_end = max(r["init"] + r["flag_verify"] + r["cumsum"]
                         for r in ubep if r["role"] == "C")
        assert cumsum_end <= send_end
        assert ubep[0]["cut"] > 0


def test_fig13_the_saving_is_synchronisation_so_it_shrinks_as_k_grows_the_payload(tmp_path):
    """The paper's improvement rises with k; here UBEP's saving is almost all BSP-cost, which
    does not grow with k, while both systems' sending does — so the improvement falls."""
    rows = by(quick("fig13", tmp_path)["rows"], "topk")
    assert all(r["improvement"] > 0 for r in rows)
    saving = [r["cann_bsp"] - r["ubep_bsp"] for r in rows]
    assert all(s > 0 for s in saving)
    assert max(saving) < 1.5 * min(saving)
    assert rows[-1]["cann_a2a"] > 2 * rows[0]["cann_a2a"]


def test_fig14_one_counting_aiv_wins_even_where_app_a_fits_five(tmp_path):
    """Counting is cheap on this vector unit (3 experts per vcount), so each AIV moved from
    sending to counting lengthens Token-Sending more than it shortens counting."""
    doc = quick("fig14", tmp_path)
    from epfabric.sim.lab.experiments.ubep_cumsum import best_groups
    assert set(best_groups(doc["rows"]).values()) == {1}
    assert any(r["fit_c"] > 4 for r in doc["rows"])
    for batch in {r["batch"] for r in doc["rows"]}:
        cell = by([r for r in doc["rows"] if r["batch"] == batch], "cumsum_aivs")
        assert all(a["t_send"] < b["t_send"] for a, b in zip(cell, cell[1:]))
