"""Email templates: named, versioned Jinja files rendered at send time.

`<name>.txt` starts with a front-matter block (`version:` and `subject:`), then the
plain-text body; `<name>.html`, when present, is the HTML alternative (autoescaped).
Rendering runs in Jinja's sandbox with undefined variables as errors, so a template can
read only the context it is given, and a missing variable names itself.
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import SandboxedEnvironment

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,99}$")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*\r?\n", re.DOTALL)


class TemplateError(ValueError):
    """The template is missing, malformed or cannot be rendered with this context."""


@dataclass(frozen=True)
class EmailTemplate:
    name: str
    version: str
    subject: jinja2.Template
    text: jinja2.Template
    html: jinja2.Template | None


@dataclass(frozen=True)
class RenderedEmail:
    template: str
    version: str
    subject: str
    text: str
    html: str | None

    def content_hash(self) -> str:
        """SHA-256 of what was rendered (subject, text, html): proves what went out."""
        digest = hashlib.sha256()
        for part in (self.subject, self.text, self.html or ""):
            digest.update(part.encode("utf-8"))
            digest.update(b"\x00")
        return digest.hexdigest()


_text_env = SandboxedEnvironment(
    undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True
)
_html_env = SandboxedEnvironment(undefined=jinja2.StrictUndefined, autoescape=True)
_cache: dict[tuple[str, float, float], EmailTemplate] = {}
_lock = threading.Lock()


def _parse_front_matter(name: str, source: str) -> tuple[dict[str, str], str]:
    match = _FRONT_MATTER.match(source)
    if not match:
        raise TemplateError(f"template {name!r}: missing front matter (--- version/subject ---)")
    fields: dict[str, str] = {}
    for line in match.group(1).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise TemplateError(f"template {name!r}: front-matter line {line!r} has no ':'")
        fields[key.strip().lower()] = value.strip()
    for required in ("version", "subject"):
        if not fields.get(required):
            raise TemplateError(f"template {name!r}: front matter needs {required}:")
    return fields, source[match.end() :]


def load_template(directory: Path, name: str) -> EmailTemplate:
    """The template `name` from `directory` (cached until its files change)."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise TemplateError(f"template name {name!r} must match [a-z0-9][a-z0-9_-]*")
    text_path = directory / f"{name}.txt"
    html_path = directory / f"{name}.html"
    try:
        text_mtime = text_path.stat().st_mtime
    except FileNotFoundError:
        raise TemplateError(f"unknown email template {name!r} (no {name}.txt)") from None
    html_mtime = html_path.stat().st_mtime if html_path.exists() else 0.0
    key = (str(text_path), text_mtime, html_mtime)
    with _lock:
        cached = _cache.get(key)
    if cached is not None:
        return cached
    fields, body = _parse_front_matter(name, text_path.read_text(encoding="utf-8"))
    try:
        template = EmailTemplate(
            name=name,
            version=fields["version"],
            subject=_text_env.from_string(fields["subject"]),
            text=_text_env.from_string(body),
            html=_html_env.from_string(html_path.read_text(encoding="utf-8"))
            if html_mtime
            else None,
        )
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(f"template {name!r}: syntax error line {exc.lineno}: {exc}") from None
    with _lock:
        _cache[key] = template
    return template


def render(template: EmailTemplate, context: dict[str, Any]) -> RenderedEmail:
    """Render subject, text and html; errors name the template and the problem."""
    try:
        subject = template.subject.render(context).strip()
        text = template.text.render(context)
        html = template.html.render(context) if template.html else None
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"template {template.name!r} needs {exc.message}") from None
    except jinja2.TemplateError as exc:
        raise TemplateError(f"template {template.name!r} failed: {exc}") from None
    return RenderedEmail(template.name, template.version, subject, text, html)
