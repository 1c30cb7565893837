"""Where the secrets sit in a free text: the rules of `masking.mask_text`, as spans.

Each rule reports the `(start, end)` of what is to be hidden; `masking` merges the spans
and renders them as `***`. The rules, in words:

- `Authorization:` / `Proxy-Authorization:` — the scheme word and the credential
  after it (`Authorization: ***`, the rest of the line stays).
- `name=value`, `name: value`, `"name": "value"` where `secret_names.credential_kind`
  says the name carries a credential. The value is:
  - quoted (`"…"`, `'…'`, or `\\"…\\"` inside an escaped JSON text): up to its closing
    quote (backslash escapes skipped), or to the end of the line when it never closes;
  - in a URL query (the name right after `?` or `&`): up to the next `&`, `#`, space,
    quote or angle bracket;
  - `Cookie:`/`Set-Cookie:`: the rest of the line;
  - otherwise unquoted: the rest of the line — spaces included, so
    `password=correct horse battery` hides all three words — except that it stops in
    front of the next pair of the same kind, a name after a space or `,`/`;`/`&`
    followed by the same separator (`password=a b user=ana` keeps `user=ana`;
    `{"pin": 1234, "user": "ana"}` keeps `"user": "ana"`).
- Bearer/Basic/Token credentials (`bearer abcdefgh…`).
- Credentials known by their shape, anywhere: Standard Webhooks `whsec_…`, Stripe
  `sk_/rk_live|test_…`, OpenAI-style `sk-…` (`sk-proj-…`), GitHub, GitLab, Slack
  `xox…-` tokens, npm and PyPI tokens, AWS key ids, Google API keys, JWTs (also
  without their signature part), and the secret path of Slack and Discord webhook URLs.
- The password in a URL's user info (`scheme://user:***@host`).
- The body of a PEM private key (`-----BEGIN … PRIVATE KEY-----` up to its `-----END`,
  or to the end of the text when the end is missing — a cut key).
- Card numbers: 13-19 digits, optionally grouped by spaces or dashes, Luhn-valid.

Every rule runs in time linear in the length of the text: no pattern has two unbounded
quantifiers that can share characters; a pattern that can fail after a long scan
starts only where such a scan cannot have been made already (at the start of a run,
not at every position inside it);
names are at most `MAX_NAME_CHARS` (100) characters long; the scans that follow a value
to the end of its line or its quote never go back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from jobdesk.shared.core.secret_names import MAX_NAME_CHARS, WHOLE_LINE, credential_kind

Span = tuple[int, int]

# The rules below marked "lower-cased" run on the text with A-Z lower-cased (same
# positions), which is what makes them case-insensitive: cheaper than `re.IGNORECASE`.
_AUTH_HEADER = re.compile(  # lower-cased
    r"\b(?:authorization|proxy-authorization)[\"']?[ \t]{0,16}[:=][ \t]{0,16}[\"']?"
    r"((?:[a-z][a-z0-9_-]{0,31}[ \t]{1,16})?[^\s\"',;]+)"
)
_BEARER = re.compile(r"\b(?:bearer|basic|token)\s+([a-z0-9._~+/=-]{8,})")  # lower-cased
_KNOWN_TOKENS = re.compile(
    r"\b(?:whsec_[A-Za-z0-9+/=]{16,}"  # Standard Webhooks signing secrets
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}"  # Stripe secret / restricted keys
    r"|sk-[A-Za-z0-9_-]{20,}"  # OpenAI-style keys: sk-…, sk-proj-…, sk-svcacct-…
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|xox[abeprs]-[A-Za-z0-9-]{10,}"  # Slack tokens
    r"|npm_[A-Za-z0-9]{30,}"  # npm
    r"|pypi-[A-Za-z0-9_-]{50,}"  # PyPI
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"  # Google API keys
    # JWTs, also without the signature. The header's scan stops at the next `eyJ`,
    # where the next attempt starts: `eyJ-eyJ-…` is not scanned to its end once per `eyJ`.
    r"|eyJ(?:(?!eyJ)[A-Za-z0-9_-]){8,}\.eyJ[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?)"
)
# Webhook URLs whose path is the credential: everything after the fixed prefix.
_WEBHOOK_URL_SECRET = re.compile(  # lower-cased
    r"\b(?:hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/"
    r"|discord(?:app)?\.com/api/webhooks/)([a-z0-9_/+-]+)"
)
# `scheme://user:password@host` (the user may be empty: `redis://:password@host`).
# Found from each `://`; the user and password classes exclude `/`, so one attempt
# never reaches past the next `://`.
_URL_PASSWORD = re.compile(r"://[^/\s:@]*:([^@\s/]+)@")
_CARD = re.compile(r"\b(?:\d[ -]?){12,18}\d\b")
_PEM_BEGIN = re.compile(r"-----begin [a-z0-9 ]{0,40}private key(?: block)?-----")  # lower-cased

_NAME = "A-Za-z0-9_.-"
# Words one of which every credential name contains (`secret_names`), lower-cased.
_HINT = "secret|token|pass|pwd|key|sig|auth|pin|otp|credential|cookie"
# A pair's name: up to `MAX_NAME_CHARS` name characters starting where a run of them
# starts and holding a hint word; then its optional closing quote and the separator.
# The name's first character comes first so that the engine skips every position that
# cannot start one; the checks that belong in front of it (no name character before
# it, a hint word ahead) sit in a one-character lookbehind around that character.
# Every attempt is bounded (the name, 16 spaces, the separator, 16 spaces): linear.
# Whether the name really is a credential is then decided in Python, for these few.
_PAIR = re.compile(  # lower-cased
    rf"([{_NAME}](?<=(?<![{_NAME}])(?=[{_NAME}]{{0,{MAX_NAME_CHARS}}}?(?:{_HINT})).)"
    rf"[{_NAME}]{{0,{MAX_NAME_CHARS - 1}}})\\?[\"']?[ \t]{{0,16}}([=:])[ \t]{{0,16}}"
)
# Where an unquoted free-text value stops: in front of the next pair of the same kind.
# The spaces are taken whole from where their run starts (possessive, no going back),
# so a long run of them is walked once.
_NEXT_PAIR = {
    sep: re.compile(
        rf"(?:(?<![ \t])[ \t]++|[,;&][ \t]*+)"
        rf"(?=\\?[\"']?[{_NAME}]{{1,{MAX_NAME_CHARS}}}\\?[\"']?[ \t]{{0,16}}{sep})"
    )
    for sep in ("=", ":")
}
# The rest of a URL query value: up to `&`, `#`, whitespace, a quote or an angle bracket.
_QUERY_VALUE = re.compile(r"[^&#\s\"'<>]*")
# The inside of a quoted value, escapes skipped; stops at the closing quote, a line
# break or the end. Unrolled (`a*(?:\\.a*)*` with disjoint parts): no backtracking.
_QUOTED_VALUE = {
    quote: re.compile(rf"[^{quote}\\\r\n]*(?:\\.[^{quote}\\\r\n]*)*") for quote in ('"', "'")
}
# The same inside an escaped text (`\\"password\\": \\"…\\"`): a backslash followed by the
# quote closes the value, any other backslash pair is skipped.
_ESCAPED_QUOTED_VALUE = {
    quote: re.compile(rf"[^{quote}\\\r\n]*(?:\\[^{quote}\r\n][^{quote}\\\r\n]*)*")
    for quote in ('"', "'")
}
_LINE_END = re.compile(r"[\r\n]")
_DOUBLED = [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]
_ASCII_LOWER = {code: code + 32 for code in range(ord("A"), ord("Z") + 1)}


def _lower_ascii(text: str) -> str:
    """`text` with A-Z lower-cased and every other character where it was."""
    lowered = text.lower()
    # `str.lower` is fast but may lengthen a text (`İ` → `i̇`); positions must not move.
    return lowered if len(lowered) == len(text) else text.translate(_ASCII_LOWER)


# Something every rule above needs to find anything (lower-cased): a separator, four
# digits in a row (a card number's start), or the start of a known shape. A text with
# none is returned as it is after this one scan: most strings of a payload.
_ANY_RULE = re.compile(
    r"[=:]|\d[ -]?\d[ -]?\d[ -]?\d|-----|(?:bearer|basic|token)\s|whsec_|sk[_-]|rk_|gh[pousr]_"
    r"|github_pat_|glpat-|xox|npm_|pypi-|akia|asia|aiza|eyj|hooks\.slack|discord"
)
#: The shortest text any rule masks something in (`pin=1`).
_SHORTEST = 5


def secret_spans(text: str) -> list[Span]:
    """Every span of `text` a rule wants hidden, in no particular order, overlapping."""
    if len(text) < _SHORTEST:
        return []
    lowered = _lower_ascii(text)
    if not _ANY_RULE.search(lowered):
        return []
    spans: list[Span] = []
    spans.extend(m.span(1) for m in _AUTH_HEADER.finditer(lowered))
    spans.extend(m.span(1) for m in _BEARER.finditer(lowered))
    spans.extend(m.span() for m in _KNOWN_TOKENS.finditer(text))
    spans.extend(m.span(1) for m in _WEBHOOK_URL_SECRET.finditer(lowered))
    if "://" in text:
        spans.extend(m.span(1) for m in _URL_PASSWORD.finditer(text))
    if "-----" in text:
        spans.extend(_pem_bodies(lowered))
    _credential_values(text, lowered, spans)
    spans.extend(m.span() for m in _CARD.finditer(text) if is_card_number(m.group()))
    return spans


def is_card_number(text: str) -> bool:
    """13-19 digits (spaces and dashes between them ignored) that pass the Luhn check."""
    digits = [int(char) for char in text if char.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    # Luhn: every second digit from the right doubled, its digits summed.
    total = sum(digits[-1::-2]) + sum(_DOUBLED[digit] for digit in digits[-2::-2])
    return total % 10 == 0


def _pem_bodies(lowered: str) -> Iterator[Span]:
    """The body of each PEM private key: up to its END line, or to the end of the text."""
    position = 0
    while True:
        begin = _PEM_BEGIN.search(lowered, position)
        if begin is None:
            return
        end = lowered.find("-----end", begin.end())
        if end < 0:
            yield begin.end(), len(lowered)
            return
        yield begin.end(), end
        # Searching on from the END line: every character is looked at once.
        position = end + len("-----end")


def _credential_values(text: str, lowered: str, spans: list[Span]) -> None:
    """Add the value of each `name=value` / `name: value` pair whose name is a credential."""
    line_end = -1  # where the line of `position` ends, once looked up (positions only grow)
    position = 0
    length = len(text)
    search = _PAIR.search
    while position < length:
        pair = search(lowered, position)
        if pair is None:
            return
        name_start, position = pair.span()
        kind = credential_kind(pair.group(1))
        if kind is None or position >= length:
            continue
        if line_end < position:
            found = _LINE_END.search(text, position)
            line_end = found.start() if found else length
        start, end = _value_span(text, position, line_end, kind, pair.group(2), name_start)
        if end > start:
            spans.append((start, end))
            position = max(position, end)


def _value_span(
    text: str, start: int, line_end: int, kind: str, separator: str, name_start: int
) -> Span:
    """The value that starts at `start`, quotes left out (the rules are in the module's
    text)."""
    first = text[start]
    if first in ('"', "'"):
        inside = _QUOTED_VALUE[first].match(text, start + 1)
        return (start + 1, inside.end()) if inside else (start, start)
    if first == "\\" and text[start + 1 : start + 2] in ('"', "'"):
        inside = _ESCAPED_QUOTED_VALUE[text[start + 1]].match(text, start + 2)
        return (start + 2, inside.end()) if inside else (start, start)
    if name_start > 0 and text[name_start - 1] in "?&":
        value = _QUERY_VALUE.match(text, start, line_end)
        return (start, value.end()) if value else (start, start)
    if kind == WHOLE_LINE:
        return start, line_end
    following = _NEXT_PAIR[separator].search(text, start, line_end)
    return start, following.start() if following else line_end
