"""Sending a finished `EmailMessage`: the provider interface and the SMTP provider.

A provider answers one question — did the server accept the mail? — and classifies
what went wrong (E4):

- connection refused/reset, timeouts, a disconnect before the DATA reply, `4xx`
  replies → `TransientMailError` (retry with backoff; counts against the breaker);
- `5xx` replies (unknown mailbox, policy rejection) → `PermanentMailError` (dead at
  once, with the server's reply);
- `250` for DATA → sent, even if the connection drops right after (QUIT is a courtesy).

`JOBDESK_SMTP_URL`: `smtp://[user:pass@]host:port` uses STARTTLS when the server offers
it, and requires it (refuses to send in clear) unless the host is loopback;
`?starttls=required` requires it everywhere; `?starttls=off` sends in clear (only for a
mail sink on a private network). `smtps://host:465` is implicit TLS. `?timeout=S`
overrides the socket timeout, which is always set. An HTTP-API provider can be added by
implementing `MailProvider.send`.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import smtplib
import ssl
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP as SMTP_POLICY
from typing import Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from jobdesk.shared.core.masking import sanitize_error

PROVIDER_KEY = "smtp:default"
_QUEUED_AS = re.compile(r"(?i)queued as\s+<?([A-Za-z0-9._@-]+)>?")
_STARTTLS_MODES = ("auto", "required", "off")


class MailError(Exception):
    """Sending failed; `code` and `reply` are the server's answer when there was one."""

    def __init__(self, message: str, code: int | None = None, reply: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.reply = reply


class TransientMailError(MailError):
    """Worth retrying later (connection trouble, timeout, 4xx)."""


class PermanentMailError(MailError):
    """Retrying cannot help (5xx: bad mailbox, rejected content)."""


class MailConfigError(ValueError):
    """`JOBDESK_SMTP_URL` cannot be used."""


@dataclass(frozen=True)
class SendResult:
    code: int
    reply: str
    provider_message_id: str | None


class MailProvider(Protocol):
    key: str

    def send(self, message: EmailMessage, *, sender: str, recipients: list[str]) -> SendResult:
        """Hand `message` over; raise TransientMailError / PermanentMailError on failure."""
        ...


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int
    implicit_tls: bool
    starttls: str
    username: str | None
    password: str | None
    timeout: float

    def __repr__(self) -> str:
        scheme = "smtps" if self.implicit_tls else "smtp"
        user = f"{self.username}:***@" if self.username else ""
        return f"SmtpConfig({scheme}://{user}{self.host}:{self.port}, starttls={self.starttls})"

    @property
    def is_loopback(self) -> bool:
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def requires_tls(self) -> bool:
        if self.implicit_tls or self.starttls == "off":
            return False
        return self.starttls == "required" or not self.is_loopback


def parse_smtp_url(url: str, *, timeout: float) -> SmtpConfig:
    """Parse `JOBDESK_SMTP_URL`; the error names what is wrong (never the password)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise MailConfigError(f"JOBDESK_SMTP_URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("smtp", "smtps"):
        raise MailConfigError("JOBDESK_SMTP_URL: expected smtp://host:port or smtps://host:port")
    if not parts.hostname:
        raise MailConfigError("JOBDESK_SMTP_URL: no host")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    unknown = set(query) - {"starttls", "timeout"}
    if unknown:
        raise MailConfigError(f"JOBDESK_SMTP_URL: unknown option(s) {', '.join(sorted(unknown))}")
    starttls = query.get("starttls", "auto").lower()
    if starttls not in _STARTTLS_MODES:
        raise MailConfigError("JOBDESK_SMTP_URL: starttls must be required, auto or off")
    if scheme == "smtps" and starttls == "off":
        raise MailConfigError("JOBDESK_SMTP_URL: smtps:// is always TLS")
    if "timeout" in query:
        try:
            timeout = float(query["timeout"])
        except ValueError:
            raise MailConfigError("JOBDESK_SMTP_URL: timeout must be a number") from None
    if not 0 < timeout <= 600:
        raise MailConfigError("JOBDESK_SMTP_URL: timeout must be between 0 and 600 seconds")
    return SmtpConfig(
        host=parts.hostname,
        port=port or (465 if scheme == "smtps" else 25),
        implicit_tls=scheme == "smtps",
        starttls=starttls,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password else None,
        timeout=timeout,
    )


def _reply_text(raw: bytes | str) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return sanitize_error(" ".join(text.split()), 500) or ""


def _classify(code: int, reply: bytes | str, step: str) -> MailError:
    text = _reply_text(reply)
    message = f"SMTP {step} refused: {code} {text}"
    if 400 <= code < 500:
        return TransientMailError(message, code, text)
    return PermanentMailError(message, code, text)


@functools.cache
def default_tls_context() -> ssl.SSLContext:
    """Verification against the system's CA certificates, built once per process and
    shared by every message: building one loads the whole CA bundle (~20 ms of CPU here),
    which a context per message cost every email job — on a plaintext loopback sink too."""
    return ssl.create_default_context()


class SmtpProvider:
    """Sends through one SMTP server with `smtplib`; a connection per message."""

    key = PROVIDER_KEY

    def __init__(self, config: SmtpConfig, tls_context: ssl.SSLContext | None = None) -> None:
        self.config = config
        self._given_tls = tls_context

    @property
    def _tls(self) -> ssl.SSLContext:
        """The context for implicit TLS and STARTTLS (built only when one is used)."""
        return self._given_tls or default_tls_context()

    def _connect(self) -> smtplib.SMTP:
        cfg = self.config
        try:
            if cfg.implicit_tls:
                return smtplib.SMTP_SSL(cfg.host, cfg.port, timeout=cfg.timeout, context=self._tls)
            return smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout)
        except smtplib.SMTPResponseException as exc:
            raise _classify(exc.smtp_code, exc.smtp_error, "greeting") from None
        except (OSError, smtplib.SMTPException) as exc:
            raise TransientMailError(
                f"cannot connect to SMTP {cfg.host}:{cfg.port}: {type(exc).__name__}: {exc}"
            ) from None

    def _prepare(self, client: smtplib.SMTP) -> None:
        cfg = self.config
        client.ehlo_or_helo_if_needed()
        if not cfg.implicit_tls and cfg.starttls != "off":
            if client.has_extn("starttls"):
                client.starttls(context=self._tls)
                client.ehlo()
            elif cfg.requires_tls:
                raise TransientMailError(
                    f"SMTP server {cfg.host}:{cfg.port} does not offer STARTTLS, which is "
                    "required off loopback (JOBDESK_SMTP_URL ?starttls=off for a private sink)"
                )
        if cfg.username:
            client.login(cfg.username, cfg.password or "")

    def send(self, message: EmailMessage, *, sender: str, recipients: list[str]) -> SendResult:
        client = self._connect()
        accepted = False
        try:
            self._prepare(client)
            options: list[str] = []
            if not all(a.isascii() for a in [sender, *recipients]):
                if not client.has_extn("smtputf8"):
                    raise PermanentMailError("server cannot take non-ASCII addresses (SMTPUTF8)")
                options = ["SMTPUTF8", "BODY=8BITMIME"]
            code, reply = client.mail(sender, options)
            if code != 250:
                raise _classify(code, reply, "MAIL FROM")
            for recipient in recipients:
                code, reply = client.rcpt(recipient)
                if code not in (250, 251):
                    raise _classify(code, reply, "RCPT TO")
            code, reply = client.data(message.as_bytes(policy=SMTP_POLICY))
            if code != 250:  # smtplib raises only when DATA itself is refused, not the mail
                raise _classify(code, reply, "DATA")
            accepted = True
        except MailError:
            raise
        except smtplib.SMTPAuthenticationError as exc:
            # Wrong credentials are a configuration problem of the provider, not of this
            # mail: retry (the breaker stops the hammering) until an operator fixes it.
            raise TransientMailError(
                f"SMTP login refused: {exc.smtp_code} {_reply_text(exc.smtp_error)}"
            ) from None
        except smtplib.SMTPResponseException as exc:
            raise _classify(exc.smtp_code, exc.smtp_error, "conversation") from None
        except (OSError, smtplib.SMTPException) as exc:
            raise TransientMailError(
                f"SMTP conversation with {self.config.host} failed: {type(exc).__name__}: {exc}"
            ) from None
        finally:
            _close(client, polite=accepted)
        text = _reply_text(reply)
        found = _QUEUED_AS.search(text)
        return SendResult(code, text, found.group(1) if found else None)


def _close(client: smtplib.SMTP, *, polite: bool) -> None:
    # After DATA was accepted the mail is sent; a failing QUIT must not turn that into an
    # error (E4: "disconnect after 250 for DATA" counts as sent).
    try:
        if polite:
            client.quit()
    except (OSError, smtplib.SMTPException):
        pass
    finally:
        client.close()
