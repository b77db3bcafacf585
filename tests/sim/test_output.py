"""sim/output.py: builds made once, and the build log that says which test paid for each."""

import json

from epfabric.sim.output import build_once


def test_a_build_is_made_once_and_logged_with_its_test(tmp_path, monkeypatch):
    log = tmp_path / "builds.jsonl"
    monkeypatch.setenv("EPFABRIC_BUILD_LOG", str(log))
    made = []
    for _ in range(2):
        build_once(tmp_path / "model-1", lambda folder: made.append(folder))
    assert made == [tmp_path / "model-1"]                  # the second call reuses it
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 1 and lines[0]["folder"] == "model-1"
    assert lines[0]["test"].endswith("test_a_build_is_made_once_and_logged_with_its_test")
    assert (tmp_path / "model-1" / "built.ok").exists()


def test_no_log_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("EPFABRIC_BUILD_LOG", raising=False)
    build_once(tmp_path / "model-2", lambda folder: None)
    assert list(tmp_path.glob("*.jsonl")) == []
