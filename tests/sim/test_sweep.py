"""The schedulers of a sweep (sim/lab/sweep.py): a scheduler address checked, and probed before
any work, so a typo or a scheduler that is not running is one line, not a traceback after the
sweep has sized and built everything."""

import pytest

from epfabric.hw.validate import UserError
from epfabric.sim.lab import sweep

from utils import require_dask


@pytest.fixture
def dask():
    require_dask()


@pytest.mark.parametrize("address, message", [
    ("nosuch://x", "'nosuch' is not a protocol a Dask scheduler is reached by; give serial, "
                   "local or PROTOCOL://host:port (PROTOCOL one of tcp, tls, ws, wss)"),
    ("inproc://x", "'inproc' is not a protocol a Dask scheduler is reached by"),
    ("ucx://host:8786", "'ucx' is not a protocol a Dask scheduler is reached by"),
    ("tcp://host", "'host' is not host:port (a port a number)"),
    ("tcp://host:port", "'host:port' is not host:port (a port a number)"),
    ("tcp://host:99999", "port 99999 is not in 1..65535"),
    ("tls://host:8786", "tls:// needs Dask's TLS settings"),
])
def test_a_bad_address_is_refused_without_connecting(address, message, dask):
    with pytest.raises(UserError) as info:
        sweep.open_scheduler(address)
    assert str(info.value).startswith(f"scheduler {address!r}: {message}")


def test_a_scheduler_that_does_not_answer_is_refused_by_the_probe(monkeypatch, dask):
    monkeypatch.setattr(sweep, "CONNECT_TIMEOUT_S", 0.2)
    checked = sweep.open_scheduler("tcp://127.0.0.1:1")          # the form is right
    with pytest.raises(UserError, match=r"^scheduler tcp://127\.0\.0\.1:1: no Dask scheduler "
                                        r"answered in 0\.2 s \(is it running"):
        checked.probe()


def test_a_running_scheduler_passes_the_probe(dask):
    from distributed import LocalCluster
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None,
                      silence_logs=50) as cluster:
        checked = sweep.open_scheduler(cluster.scheduler_address)
        assert checked.probe() is checked
    assert sweep.open_scheduler("serial").probe().scheduler == "serial"   # nothing to reach
