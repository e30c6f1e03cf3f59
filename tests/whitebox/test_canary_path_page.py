"""The white-box page names the path the canaries took, for files that label it and for older ones that do not."""

from __future__ import annotations

from types import SimpleNamespace

from dpaudit.report.whitebox import _canary_paths


def test_each_path_is_named_with_its_canaries():
    old = SimpleNamespace(settings={}, canaries=100, runs=2)  # written before the label: the cooperative path
    assert _canary_paths(old) == (("cooperative", _canary_paths(old)[0][1], 200),)
    assert _canary_paths(old)[0][1].startswith("cooperative: the trainer's audit block")
    path = SimpleNamespace(
        settings={"canary_path": "gradient-path", "canary_paths": {"gradient-path": 500}}, canaries=250, runs=2
    )
    ((name, words, n),) = _canary_paths(path)
    assert (name, n) == ("gradient-path", 500) and "real gradient path" in words
