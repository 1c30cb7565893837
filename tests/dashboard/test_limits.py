"""Request bodies are bounded before anything parses them (issue 12 #8)."""

from __future__ import annotations

import io
import json
from typing import Any
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa
from flask import Flask
from werkzeug.test import EnvironBuilder, TestResponse, run_wsgi_app
from werkzeug.wrappers import Request

from jobdesk.dashboard import init_dashboard
from jobdesk.shared.settings import Settings
from tests.dashboard.conftest import SECRET, Browser, dead_job

# Roles, headers, forms and rendering: the same on either database.
pytestmark = pytest.mark.one_database

THIRTY_MB = 30 * 1024 * 1024


MULTIPART_HEAD = (
    b"--xyz\r\n"
    b'Content-Disposition: form-data; name="upload"; filename="big.bin"\r\n'
    b"Content-Type: application/octet-stream\r\n\r\n"
)
MULTIPART_TAIL = b"\r\n--xyz--\r\n"
MULTIPART = "multipart/form-data; boundary=xyz"
FORM = "application/x-www-form-urlencoded"


class CountingStream(io.RawIOBase):
    """A request body — `head`, `size` bytes of text lines, `tail` — that counts how much
    of it the app reads. The default is a well-formed multipart body with one file
    field: a file part is what Flask's form-field limit does not cover (it is spooled to
    a temporary file in full)."""

    LINE = b"x" * 78 + b"\r\n"

    def __init__(
        self, size: int, head: bytes = MULTIPART_HEAD, tail: bytes = MULTIPART_TAIL
    ) -> None:
        self.HEAD, self.TAIL = head, tail
        self.size = len(self.HEAD) + size + len(self.TAIL)
        self.filler = size
        self.given = 0

    def readable(self) -> bool:
        return True

    def _byte_range(self, start: int, n: int) -> bytes:
        out = bytearray()
        head, tail_start = len(self.HEAD), len(self.HEAD) + self.filler
        for position in range(start, start + n):
            if position < head:
                out += self.HEAD[position : position + 1]
            elif position < tail_start:
                offset = (position - head) % len(self.LINE)
                out += self.LINE[offset : offset + 1]
            else:
                out += self.TAIL[position - tail_start : position - tail_start + 1]
        return bytes(out)

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self.given, 65536)
        start = self.given
        head, tail_start = len(self.HEAD), len(self.HEAD) + self.filler
        if start >= head and start + n <= tail_start:
            # The fast path, inside the file's content: whole lines from `start` on.
            offset = (start - head) % len(self.LINE)
            lines = self.LINE * (n // len(self.LINE) + 2)
            buffer[:n] = lines[offset : offset + n]
        else:
            buffer[:n] = self._byte_range(start, n)
        self.given += n
        return n


def _post(
    app: Flask,
    url: str,
    stream: CountingStream,
    *,
    content_length: int | None,
    content_type: str = MULTIPART,
) -> TestResponse:
    """POST `stream` the way a server hands a body to the app."""
    environ = EnvironBuilder(
        path=url, method="POST", headers={"Origin": "http://localhost"}
    ).get_environ()
    environ["CONTENT_TYPE"] = content_type
    environ["wsgi.input"] = stream
    if content_length is None:
        environ.pop("CONTENT_LENGTH", None)
        environ["wsgi.input_terminated"] = True  # a chunked body the server de-chunks
    else:
        environ["CONTENT_LENGTH"] = str(content_length)
    # Straight to the WSGI app: the test client would buffer (and seek) the body first.
    body, status, headers = run_wsgi_app(app.wsgi_app, environ, buffered=True)
    return TestResponse(body, status, headers, request=Request(environ))


def test_a_30_mb_unauthenticated_multipart_body_is_refused_unread(app: Flask) -> None:
    stream = CountingStream(THIRTY_MB)
    response = _post(app, "/login", stream, content_length=stream.size)
    assert response.status_code == 413
    assert "limit" in response.get_data(as_text=True)
    assert stream.given < 1024 * 1024, f"read {stream.given:,} bytes before refusing"


def test_a_form_without_content_length_is_cut_off_at_the_limit(app: Flask) -> None:
    stream = CountingStream(THIRTY_MB, head=b"username=otto&password=", tail=b"")
    response = _post(app, "/login", stream, content_length=None, content_type=FORM)
    assert response.status_code == 413
    limit = app.extensions["jobdesk"].request_body_limit
    assert stream.given <= limit + 2 * 65536, f"read {stream.given:,} bytes"


def test_multipart_is_refused_unread_whatever_its_length(app: Flask) -> None:
    """No dashboard form is multipart; a multipart body (whose file parts would be
    spooled to disk) is refused before a byte is parsed, also when chunked."""
    stream = CountingStream(THIRTY_MB)
    response = _post(app, "/login", stream, content_length=None)
    assert response.status_code == 415
    assert stream.given == 0
    small = CountingStream(1000)
    assert _post(app, "/login", small, content_length=small.size).status_code == 415
    assert small.given == 0


def test_the_limit_also_holds_when_mounted_in_a_host_app(settings: Settings) -> None:
    host = Flask("host")
    host.secret_key = SECRET
    init_dashboard(host, settings=settings, url_prefix="/ops")
    try:
        stream = CountingStream(THIRTY_MB)
        response = _post(host, "/ops/login", stream, content_length=stream.size)
        assert response.status_code == 413
        assert stream.given < 1024 * 1024
        assert host.config["MAX_CONTENT_LENGTH"] is None  # the host's own routes: its call
    finally:
        host.extensions["jobdesk"].dispose()


def test_a_large_fix_form_within_the_limit_is_parsed_not_refused(
    operator: Browser, engine: sa.Engine
) -> None:
    """Flask's own 500 kB form-field default must not undercut the dashboard's limit:
    an oversized payload gets the payload-size message, not a bare 413."""
    with engine.begin() as conn:
        job_id = dead_job(conn)
    big = {"endpoint": "crm", "event": "user.created", "data": {"blob": "y" * 540_000}}
    response = operator.post(f"/jobs/{job_id}/fix", {"payload": json.dumps(big)})
    assert response.status_code == 422
    assert "the limit is 262,144 bytes" in response.get_data(as_text=True)


def test_a_chunked_form_within_the_limit_arrives_whole(app: Flask, users: None) -> None:
    browser = Browser(app.test_client())
    browser.get("/login")
    body = urlencode(
        {"csrf_token": browser.token, "username": "otto", "password": "correct horse battery"}
    ).encode()
    response = browser.client.post(
        "/login",
        input_stream=io.BytesIO(body),
        content_type=FORM,
        headers={"Transfer-Encoding": "chunked", "Origin": "http://localhost"},
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert response.status_code == 303, response.get_data(as_text=True)
