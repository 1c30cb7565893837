"""The standalone app's URL rules make each URL builder on first use: the URLs they build
are Werkzeug's, with and without extra query arguments, defaults and converters."""

from __future__ import annotations

import pytest
from flask import Flask, url_for
from werkzeug.routing import Map, Rule

from jobdesk.dashboard.routing import NAME, IdConverter
from jobdesk.dashboard.url_rules import LazyBuilderRule

PATTERNS = [
    ("/", {}),
    ("/jobs/<jobdesk_id:job_id>", {}),
    ("/jobs/<jobdesk_id:job_id>/attempts/<int:attempt>", {}),
    ("/static/<path:filename>", {}),
    ("/batches/", {"page": 1}),
]
VALUES = [
    {"job_id": 42, "attempt": 3, "filename": "css/dashboard.css", "page": 1},
    {"job_id": 7, "attempt": 1, "filename": "a b.png", "page": 1, "status": "dead", "q": "x&y"},
]


def _adapter(rule_class: type[Rule]) -> object:
    rules = [rule_class(path, endpoint=path, defaults=defaults or None)
             for path, defaults in PATTERNS]  # fmt: skip
    return Map(rules, converters={NAME: IdConverter}).bind("example.org")


@pytest.mark.parametrize("values", VALUES)
@pytest.mark.parametrize("append_unknown", [True, False])
def test_every_rule_builds_what_werkzeugs_own_rule_builds(
    values: dict[str, object], append_unknown: bool
) -> None:
    lazy, eager = _adapter(LazyBuilderRule), _adapter(Rule)
    for path, _ in PATTERNS:
        for _twice in range(2):  # the stand-in, then the builder that replaced it
            assert lazy.build(path, values, append_unknown=append_unknown) == eager.build(  # type: ignore[attr-defined]
                path, values, append_unknown=append_unknown
            )


def test_a_builder_is_made_once_then_called_directly() -> None:
    rule = LazyBuilderRule("/jobs/<int:job_id>", endpoint="job")
    Map([rule])
    stand_in = rule._build_unknown
    assert rule.build({"job_id": 5}) == ("", "/jobs/5")
    assert rule._build_unknown is not stand_in
    assert rule.build({"job_id": 6, "x": "1"}) == ("", "/jobs/6?x=1")


def test_the_standalone_app_uses_them_and_url_for_works(app: Flask) -> None:
    assert app.url_rule_class is LazyBuilderRule
    assert all(isinstance(rule, LazyBuilderRule) for rule in app.url_map.iter_rules())
    with app.test_request_context():
        assert url_for("jobdesk.jobs.index", status="dead") == "/jobs?status=dead"
