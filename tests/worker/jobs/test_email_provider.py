"""E4 against a real SMTP server: what the SMTP provider calls sent, retryable or fatal."""

from __future__ import annotations

import ssl
import time
from email.message import EmailMessage

import pytest

from jobdesk.worker.jobs.email_provider import (
    MailConfigError,
    PermanentMailError,
    SmtpProvider,
    TransientMailError,
    default_tls_context,
    parse_smtp_url,
)
from tests.worker.jobs.smtp_server import HangingServer, SmtpSink, free_port


def _message() -> EmailMessage:
    message = EmailMessage()
    message["From"] = "jobdesk@example.com"
    message["To"] = "ana@example.com"
    message["Subject"] = "hello"
    message["Message-ID"] = "<fixed@example.com>"
    message.set_content("body")
    return message


def _send(url: str, timeout: float = 2.0) -> object:
    provider = SmtpProvider(parse_smtp_url(url, timeout=timeout))
    return provider.send(_message(), sender="jobdesk@example.com", recipients=["ana@example.com"])


def test_250_is_sent_with_the_provider_message_id(smtp: SmtpSink) -> None:
    result = _send(smtp.url)
    assert result.code == 250  # type: ignore[attr-defined]
    assert result.provider_message_id == "ABC123"  # type: ignore[attr-defined]
    assert [r.message_id for r in smtp.received] == ["<fixed@example.com>"]


def test_451_is_transient_with_the_reply(smtp: SmtpSink) -> None:
    smtp.set_mode("451")
    with pytest.raises(TransientMailError) as info:
        _send(smtp.url)
    assert info.value.code == 451
    assert "Temporary local problem" in str(info.value)


def test_550_is_permanent_with_the_reply(smtp: SmtpSink) -> None:
    smtp.set_mode("550")
    with pytest.raises(PermanentMailError) as info:
        _send(smtp.url)
    assert info.value.code == 550
    assert "User unknown" in str(info.value)


def test_disconnect_after_250_for_data_counts_as_sent(smtp: SmtpSink) -> None:
    smtp.set_mode("drop")
    result = _send(smtp.url)
    assert result.code == 250  # type: ignore[attr-defined]
    assert len(smtp.received) == 1


def test_server_hanging_at_greeting_times_out() -> None:
    server = HangingServer().start()
    try:
        started = time.monotonic()
        with pytest.raises(TransientMailError, match=r"cannot connect|timed out"):
            _send(f"smtp://127.0.0.1:{server.port}", timeout=0.3)
        assert time.monotonic() - started < 2
    finally:
        server.stop()


def test_connection_refused_is_transient() -> None:
    with pytest.raises(TransientMailError, match="cannot connect"):
        _send(f"smtp://127.0.0.1:{free_port()}")


def test_starttls_required_but_not_offered_refuses_to_send_in_clear(smtp: SmtpSink) -> None:
    with pytest.raises(TransientMailError, match="STARTTLS"):
        _send(f"{smtp.url}?starttls=required")
    assert smtp.received == []


def test_smtp_url_parsing() -> None:
    config = parse_smtp_url("smtp://mailer:s%40cret@smtp.example.com:587", timeout=10)
    assert (config.host, config.port, config.username, config.password) == (
        "smtp.example.com",
        587,
        "mailer",
        "s@cret",
    )
    assert config.requires_tls  # off loopback STARTTLS is required by default
    assert "s@cret" not in repr(config)
    assert not parse_smtp_url("smtp://127.0.0.1:25", timeout=10).requires_tls
    assert parse_smtp_url("smtp://localhost:25?starttls=required", timeout=1).requires_tls
    assert parse_smtp_url("smtps://smtp.example.com", timeout=1).port == 465
    assert parse_smtp_url("smtp://h:25?timeout=0.5", timeout=10).timeout == 0.5
    for bad in (
        "http://h",
        "smtp://",
        "smtp://h?starttls=maybe",
        "smtp://h?x=1",
        "smtp://h?timeout=0",
    ):
        with pytest.raises(MailConfigError):
            parse_smtp_url(bad, timeout=10)


def test_a_plaintext_send_builds_no_tls_context_and_providers_share_one(smtp: SmtpSink) -> None:
    """Building a verifying context loads the whole CA bundle (~20 ms of CPU): it is made
    once per process, and only when a message goes over TLS."""
    default_tls_context.cache_clear()
    _send(smtp.url)
    assert default_tls_context.cache_info().currsize == 0
    first = SmtpProvider(parse_smtp_url("smtp://mail.example.com:587", timeout=1))
    second = SmtpProvider(parse_smtp_url("smtps://mail.example.com:465", timeout=1))
    assert first._tls is second._tls is default_tls_context()
    assert first._tls.verify_mode is ssl.CERT_REQUIRED
    assert first._tls.check_hostname
    own = ssl.create_default_context()
    assert SmtpProvider(first.config, tls_context=own)._tls is own
