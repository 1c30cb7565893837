"""URL rules that compile their URL builders on first use (the standalone app's rules).

Werkzeug turns every rule into two generated Python functions (`url_for` with and without
extra query arguments) the moment the rule is added: a syntax tree built, compiled and
executed per function, two thirds of `create_app()`'s time for the dashboard's 65 rules
(54 ms → 17 ms here), paid by every gunicorn worker at start and by every test that
builds an app. Most rules are only ever matched, and a built URL needs one of the two
builders: each is made the first time it is called, by Werkzeug's own code, and then
replaces its stand-in, so later calls go straight to it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from werkzeug.routing import Rule


class LazyBuilderRule(Rule):
    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        attribute = "_build_unknown" if append_unknown else "_build"
        compile_builder = super()._compile_builder

        def first_build(rule: Rule, **values: Any) -> tuple[str, str]:
            builder: Callable[..., tuple[str, str]] = compile_builder(append_unknown).__get__(
                rule, None
            )
            setattr(rule, attribute, builder)
            return builder(**values)

        return first_build
