"""Apps of one process share their compiled templates (`dashboard.compiled_templates`):
a second environment loads a template without compiling it, an edited template is
compiled again, and every app `create_app` builds uses the shared cache — a host's own
environment, when the dashboard is mounted, is left alone."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from jinja2 import DictLoader, Environment

from jobdesk.dashboard import compiled_templates, init_dashboard
from jobdesk.dashboard.compiled_templates import ProcessTemplates
from jobdesk.shared.settings import Settings

pytestmark = pytest.mark.one_database


class CountingEnvironment(Environment):
    """An environment that counts the templates it compiles from source."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.compiled = 0

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        self.compiled += 1
        return super().compile(*args, **kwargs)


def render(cache: ProcessTemplates, source: str) -> tuple[str, int]:
    env = CountingEnvironment(loader=DictLoader({"page.html": source}), bytecode_cache=cache)
    return env.get_template("page.html").render(name="Ada"), env.compiled


def test_a_second_environment_loads_what_the_first_compiled() -> None:
    cache = ProcessTemplates()
    assert render(cache, "Hello {{ name }}") == ("Hello Ada", 1)
    assert render(cache, "Hello {{ name }}") == ("Hello Ada", 0)


def test_an_edited_template_is_compiled_again() -> None:
    cache = ProcessTemplates()
    render(cache, "Hello {{ name }}")
    assert render(cache, "Goodbye {{ name }}") == ("Goodbye Ada", 1)
    assert render(cache, "Goodbye {{ name }}") == ("Goodbye Ada", 0)


def test_every_app_shares_the_cache_and_a_mounting_host_keeps_its_own(
    app: Flask, settings: Settings
) -> None:
    assert app.jinja_env.bytecode_cache is compiled_templates.COMPILED
    assert app.test_client().get("/login").status_code == 200

    host = Flask("host")
    host.secret_key = settings.secret_key
    init_dashboard(host, settings=settings, url_prefix="/jobdesk")
    try:
        assert host.jinja_env.bytecode_cache is None
        assert host.test_client().get("/jobdesk/login").status_code == 200
    finally:
        host.extensions["jobdesk"].dispose()
