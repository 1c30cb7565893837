"""The Operators page (admin): accounts listed; add, change role, disable / enable and
reset a password — each audited, bad input shown next to its field with nothing written,
sessions ended where the CLI ends them, and the last admin kept."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask

from jobdesk.shared.core.audit import audit_log
from jobdesk.shared.operator.commands.accounts import get_operator, list_operators
from tests.dashboard.conftest import PASSWORD, Browser, add_user, browser_for

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

COOKIE = "jobdesk_session"
NEW_PASSWORD = "a brand new passphrase"


def _audit(engine: sa.Engine, subject: str) -> list[tuple[Any, ...]]:
    """What the dashboard wrote about `subject` (the fixtures' accounts come from "cli")."""
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(audit_log.c.actor, audit_log.c.action, audit_log.c.details)
            .where(audit_log.c.subject == subject, audit_log.c.actor != "cli")
            .order_by(audit_log.c.id)
        )
        return [tuple(row) for row in rows]


def _row(page: str, username: str) -> str:
    return page.split(f'id="operator-{username}"')[1].split("</tr>", maxsplit=1)[0]


def _copy_cookie(source: Browser, app: Flask) -> Browser:
    cookie = source.client.get_cookie(COOKIE)
    assert cookie is not None
    copy = Browser(app.test_client())
    copy.client.set_cookie(COOKIE, cookie.value)
    return copy


def test_admins_see_every_account_and_only_they_get_the_link(
    admin: Browser, operator: Browser, viewer: Browser, engine: sa.Engine
) -> None:
    page = admin.get("/operators")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    for name, role in (("ada", "admin"), ("otto", "operator"), ("vera", "viewer")):
        row = _row(text, name)
        assert f"role-{role}" in row
        assert "enabled" in row
    assert "never" not in _row(text, "otto")  # otto has logged in (the fixture did)
    assert "(you)" in _row(text, "ada")
    assert "Disable" not in _row(text, "ada")  # not for the account in use
    assert 'href="/operators"' in admin.get("/").get_data(as_text=True)
    for other in (operator, viewer):
        assert 'href="/operators"' not in other.get("/").get_data(as_text=True)
        assert other.get("/operators").status_code == 403
        form = {"username": "eve", "role": "admin", "password": "x" * 12}
        refused = other.post("/operators", form)
        assert refused.status_code == 403
    with engine.connect() as conn:
        assert get_operator(conn, "eve") is None


def test_adding_an_account_shows_problems_next_to_the_fields(
    admin: Browser, engine: sa.Engine
) -> None:
    short = admin.post("/operators", {"username": "nina", "role": "operator", "password": "short"})
    assert short.status_code == 422
    text = short.get_data(as_text=True)
    assert 'id="add-password-error"' in text
    assert "Password: must be at least 10 characters" in text
    assert 'value="nina"' in text  # what was typed stays, the password does not
    assert "short" not in text.split('id="add-password"')[1].split(">")[0]
    bad = admin.post("/operators", {"username": "nina smith", "role": "root", "password": "ok"})
    assert bad.status_code == 422
    text = bad.get_data(as_text=True)
    assert 'id="add-username-error"' in text
    assert 'id="add-role-error"' in text
    assert "Role: must be one of viewer, operator, admin" in text
    taken = admin.post("/operators", {"username": "otto", "role": "viewer", "password": PASSWORD})
    assert taken.status_code == 422
    assert "Username: otto already exists" in taken.get_data(as_text=True)
    with engine.connect() as conn:
        assert [a.username for a in list_operators(conn)] == ["ada", "otto", "vera"]
    assert _audit(engine, "operator:nina") == []
    done = admin.post("/operators", {"username": "nina", "role": "operator", "password": PASSWORD})
    assert done.status_code == 303
    assert "Added nina as operator" in admin.get("/operators").get_data(as_text=True)
    assert _audit(engine, "operator:nina") == [("ada", "operator.add", {"role": "operator"})]
    assert browser_for(admin.client.application, "nina").get("/").status_code == 200


def test_a_role_change_is_audited_and_applies_at_the_next_request(
    admin: Browser, operator: Browser, engine: sa.Engine
) -> None:
    assert operator.post("/alerts/1/acknowledge", {"note": "x"}).status_code != 403
    done = admin.post("/operators/otto/role", {"role": "viewer"})
    assert done.status_code == 303
    assert "otto is now viewer (was operator)" in admin.get("/operators").get_data(as_text=True)
    assert _audit(engine, "operator:otto") == [
        ("ada", "operator.role", {"from": "operator", "to": "viewer"})
    ]
    # The session goes on, with the new role.
    assert operator.get("/").status_code == 200
    assert operator.post("/alerts/1/acknowledge", {"note": "x"}).status_code == 403
    again = admin.post("/operators/otto/role", {"role": "viewer"})
    assert again.status_code == 303
    assert "already viewer; nothing changed" in admin.get("/operators").get_data(as_text=True)
    bad = admin.post("/operators/otto/role", {"role": "root"})
    assert bad.status_code == 303
    assert "the role must be one of" in admin.get("/operators").get_data(as_text=True)
    missing = admin.post("/operators/nobody/role", {"role": "admin"})
    assert missing.status_code == 303
    assert "no operator named &#39;nobody&#39;" in admin.get("/operators").get_data(as_text=True)
    assert len(_audit(engine, "operator:otto")) == 1


def test_disable_and_enable_end_every_session_of_the_account(
    app: Flask, admin: Browser, operator: Browser, engine: sa.Engine
) -> None:
    copied = _copy_cookie(operator, app)
    assert copied.get("/").status_code == 200
    assert admin.post("/operators/otto/disable").status_code == 303
    assert "Disabled otto" in admin.get("/operators").get_data(as_text=True)
    assert operator.get("/").status_code == 303
    assert copied.get("/").status_code == 303
    assert Browser(app.test_client()).login("otto").status_code == 401
    assert "disabled" in _row(admin.get("/operators").get_data(as_text=True), "otto")
    assert admin.post("/operators/otto/enable").status_code == 303
    assert copied.get("/").status_code == 303  # old cookies stay dead
    assert browser_for(app, "otto").get("/").status_code == 200
    actions = [action for _, action, _ in _audit(engine, "operator:otto")]
    assert actions == ["operator.disable", "operator.enable"]


def test_a_password_reset_ends_the_sessions_and_bad_ones_show_inline(
    app: Flask, admin: Browser, operator: Browser, engine: sa.Engine
) -> None:
    short = admin.post("/operators/otto/password", {"password": "tiny"})
    assert short.status_code == 422
    row = _row(short.get_data(as_text=True), "otto")
    assert '<details class="reset" open>' in row
    assert "Password: must be at least 10 characters" in row
    assert 'aria-invalid="true"' in row
    assert operator.get("/").status_code == 200  # nothing happened
    assert _audit(engine, "operator:otto") == []
    assert admin.post("/operators/otto/password", {"password": NEW_PASSWORD}).status_code == 303
    assert "Password of otto reset" in admin.get("/operators").get_data(as_text=True)
    assert operator.get("/").status_code == 303
    assert Browser(app.test_client()).login("otto").status_code == 401
    assert Browser(app.test_client()).login("otto", NEW_PASSWORD).status_code == 303
    assert _audit(engine, "operator:otto") == [("ada", "operator.password", None)]


def test_resetting_your_own_password_keeps_you_signed_in_here_only(
    app: Flask, admin: Browser
) -> None:
    elsewhere = _copy_cookie(admin, app)
    assert admin.post("/operators/ada/password", {"password": NEW_PASSWORD}).status_code == 303
    page = admin.get("/operators")
    assert page.status_code == 200
    assert "Your password is changed; your other sessions have ended." in page.get_data(
        as_text=True
    )
    assert elsewhere.get("/").status_code == 303


def test_the_last_enabled_admin_stays_an_enabled_admin(
    app: Flask, admin: Browser, engine: sa.Engine
) -> None:
    demote = admin.post("/operators/ada/role", {"role": "operator"})
    assert demote.status_code == 303
    text = admin.get("/operators").get_data(as_text=True)
    assert "Account ada not changed: ada is the only enabled admin" in text
    disable = admin.post("/operators/ada/disable")
    assert disable.status_code == 303
    assert "it is the account you are signed in with" in admin.get("/operators").get_data(
        as_text=True
    )
    with engine.connect() as conn:
        account = get_operator(conn, "ada")
        assert account is not None
        assert (account.role, account.disabled) == ("admin", False)
    assert _audit(engine, "operator:ada") == []
    # With a second admin, ada may step down; the page then is no longer hers.
    add_user(engine, "bo", "admin")
    stepped = admin.post("/operators/ada/role", {"role": "operator"})
    assert stepped.status_code == 303
    assert stepped.headers["Location"] == "/"
    assert admin.get("/operators").status_code == 403
    bo = browser_for(app, "bo")
    assert bo.post("/operators/bo/role", {"role": "viewer"}).status_code == 303
    assert "bo is the only enabled admin" in bo.get("/operators").get_data(as_text=True)
    # A disabled admin does not count as the one left.
    assert bo.post("/operators/ada/role", {"role": "admin"}).status_code == 303
    assert bo.post("/operators/ada/disable").status_code == 303
    assert bo.post("/operators/bo/role", {"role": "viewer"}).status_code == 303
    assert "bo is the only enabled admin" in bo.get("/operators").get_data(as_text=True)


def test_account_changes_need_the_csrf_token(admin: Browser, engine: sa.Engine) -> None:
    response = admin.client.post("/operators/otto/disable", headers={"Origin": "http://localhost"})
    assert response.status_code == 403
    with engine.connect() as conn:
        account = get_operator(conn, "otto")
        assert account is not None
        assert not account.disabled


def test_names_with_dots_and_at_signs_work_in_every_action(
    admin: Browser, engine: sa.Engine
) -> None:
    name = "sam.o-1@example.com"
    form = {"username": name, "role": "viewer", "password": PASSWORD}
    assert admin.post("/operators", form).status_code == 303
    assert admin.post(f"/operators/{name}/role", {"role": "operator"}).status_code == 303
    assert admin.post(f"/operators/{name}/password", {"password": NEW_PASSWORD}).status_code == 303
    assert admin.post(f"/operators/{name}/disable").status_code == 303
    with engine.connect() as conn:
        account = get_operator(conn, name)
        assert account is not None
        assert (account.role, account.disabled) == ("operator", True)
    assert f'id="operator-{name}"' in admin.get("/operators").get_data(as_text=True)


def test_a_name_differing_only_by_case_is_the_same_account(
    app: Flask, admin: Browser, engine: sa.Engine
) -> None:
    """`Otto` could be added beside `otto`: two accounts one person would read as one."""
    taken = admin.post("/operators", {"username": "Otto", "role": "admin", "password": PASSWORD})
    assert taken.status_code == 422
    text = taken.get_data(as_text=True)
    assert "Username: otto already exists, and usernames are case-insensitive" in text
    with engine.connect() as conn:
        assert [a.username for a in list_operators(conn)] == ["ada", "otto", "vera"]
    # Logging in works in any capitalisation, as the account.
    browser = Browser(app.test_client())
    assert browser.login("OTTO").status_code == 303
    assert "otto" in browser.get("/").get_data(as_text=True)
    # The account in use cannot be disabled through another spelling of its name.
    admin.post("/operators/ADA/disable")
    assert "it is the account you are signed in with" in admin.get("/operators").get_data(
        as_text=True
    )
    with engine.connect() as conn:
        account = get_operator(conn, "ada")
        assert account is not None
        assert not account.disabled


def test_common_passwords_and_the_username_are_refused_next_to_the_field(
    admin: Browser, operator: Browser, engine: sa.Engine
) -> None:
    for password, why in (
        ("Password123", "is one of the most common passwords"),
        ("nina-at-the-front-desk", "must not contain the username"),
    ):
        page = admin.post(
            "/operators", {"username": "nina", "role": "viewer", "password": password}
        )
        assert page.status_code == 422
        assert f"Password: {why}" in page.get_data(as_text=True)
        reset = admin.post(
            "/operators/otto/password", {"password": password.replace("nina", "otto")}
        )
        assert reset.status_code == 422
        assert f"Password: {why}" in _row(reset.get_data(as_text=True), "otto")
    with engine.connect() as conn:
        assert get_operator(conn, "nina") is None
    assert operator.get("/").status_code == 200  # otto's password did not change
    assert _audit(engine, "operator:otto") == []
