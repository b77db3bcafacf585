"""sim/output.py: builds made once, and the build log that says which test paid for each."""

import json

from epfabric.sim.output import build_once, log_event


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


def test_a_fields_function_is_called_only_when_the_line_is_written(tmp_path, monkeypatch):
    calls = []

    def design():
        calls.append(1)
        return "abc"
    monkeypatch.delenv("EPFABRIC_BUILD_LOG", raising=False)
    log_event(pysim_run=design, seconds=1.0)
    assert calls == []
    monkeypatch.setenv("EPFABRIC_BUILD_LOG", str(tmp_path / "log.jsonl"))
    log_event(pysim_run=design, seconds=1.23456)
    line = json.loads((tmp_path / "log.jsonl").read_text())
    assert calls == [1] and line["pysim_run"] == "abc" and line["seconds"] == 1.23
