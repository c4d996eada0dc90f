"""A C++/CUDA tokenizer for the static rules: enough of translation phases 1-3 to be honest.

It knows what a grep does not: comments (``//`` and ``/* */``), string and character
literals (with encoding prefixes and raw strings ``R"d(...)d"``), digit separators
(``1'000``), line splices (a backslash-newline inside an identifier or a ``//`` comment),
digraphs (``%:include``, ``<:``), and preprocessor lines.  Text inside comments never
becomes a token, and text inside a literal stays a single STRING/CHAR token, so neither
can hide nor fake a match.

Output: a list of :class:`Token` (identifiers, numbers, literals, punctuators) and of
:class:`Directive` (one per preprocessor line).  The tokens of a directive's body
(``#define X at::add``, ``#if``) are part of the token list too, marked ``in_directive``,
so a macro cannot hide a forbidden name; ``#include`` and ``#pragma`` bodies are not
tokenized (the include target is in :attr:`Directive.header`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

IDENT = "ident"
NUMBER = "number"
STRING = "string"
CHAR = "char"
PUNCT = "punct"

_PUNCTS = sorted(
    """%:%: ... <=> ->* <<= >>= :: -> ++ -- << >> <= >= == != && || += -= *= /= %= &= |= ^= ## .*
    <: :> <% %> %: { } [ ] ( ) ; : ? . + - * / % ^ & | ~ ! = < > , # @ $ \\""".split(),
    key=len,
    reverse=True,
)
_DIGRAPHS = {"<:": "[", ":>": "]", "<%": "{", "%>": "}", "%:": "#", "%:%:": "##"}
_STRING_PREFIXES = ("u8R", "uR", "UR", "LR", "R", "u8", "u", "U", "L", "")


@dataclass(frozen=True, slots=True)
class Token:
    """One preprocessing token with its 1-based source line."""

    kind: str
    text: str
    """Spelling (digraphs normalized; for literals the whole literal with quotes and prefix)."""
    line: int
    value: str = ""
    """For STRING/CHAR: the characters between the quotes (escapes left as written)."""
    in_directive: bool = False


@dataclass(frozen=True, slots=True)
class Directive:
    """A preprocessor line: ``#name body``."""

    name: str
    body: str
    line: int
    header: str | None = None
    """For ``#include``/``#import``/``#embed``: the target between ``<>`` or quotes; None if computed."""
    system: bool = False
    """The target was written ``<...>``."""


@dataclass
class Lexed:
    """A tokenized source: tokens in order, and the directives."""

    tokens: list[Token] = field(default_factory=list)
    directives: list[Directive] = field(default_factory=list)


def _splice(src: str, first_line: int) -> tuple[str, list[int]]:
    """Phase 2: drop backslash-newlines; return the text and the source line of each char."""
    out: list[str] = []
    lines: list[int] = []
    line = first_line
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "\\":
            j = i + 1
            while j < n and src[j] in " \t":  # GCC accepts spaces between \ and newline
                j += 1
            if j < n and src[j] == "\n":
                line += 1
                i = j + 1
                continue
            if j + 1 < n and src[j] == "\r" and src[j + 1] == "\n":
                line += 1
                i = j + 2
                continue
        out.append(c)
        lines.append(line)
        if c == "\n":
            line += 1
        i += 1
    lines.append(line)
    return "".join(out), lines


def _is_ident_start(c: str) -> bool:
    return c.isalpha() or c == "_" or c == "$" or ord(c) > 127


def _is_ident_char(c: str) -> bool:
    return c.isalnum() or c == "_" or c == "$" or ord(c) > 127


def tokenize(src: str, *, first_line: int = 1, line_map: list[int] | None = None) -> Lexed:
    """Tokenize C++/CUDA source.

    ``first_line`` shifts every line number (for code that starts mid-file); ``line_map``,
    if given, maps the 0-based line index of ``src`` to the reported line (for C++ held in
    Python string literals).  Never raises: an unterminated comment or literal runs to the
    end of the text.
    """
    text, char_line = _splice(src, 1)

    def lineno(pos: int) -> int:
        ln = char_line[min(pos, len(char_line) - 1)]
        if line_map is not None:
            return line_map[min(ln - 1, len(line_map) - 1)] if line_map else first_line
        return ln + first_line - 1

    out = Lexed()
    i, n = 0, len(text)
    at_line_start = True  # only whitespace/comments since the last newline
    while i < n:
        c = text[i]
        if c == "\n":
            at_line_start = True
            i += 1
            continue
        if c in " \t\r\f\v":
            i += 1
            continue
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        if at_line_start and (c == "#" or text.startswith("%:", i)):
            i = _directive(text, i, lineno, out)
            at_line_start = True
            continue
        at_line_start = False
        start = i
        in_dir = False
        # string / char literal, possibly prefixed
        lit = _literal_at(text, i)
        if lit is not None:
            kind, end, value = lit
            out.tokens.append(Token(kind, text[start:end], lineno(start), value, in_dir))
            i = end
            continue
        if _is_ident_start(c):
            j = i + 1
            while j < n and _is_ident_char(text[j]):
                j += 1
            out.tokens.append(Token(IDENT, text[i:j], lineno(i), "", in_dir))
            i = j
            continue
        if c.isdigit() or (c == "." and i + 1 < n and text[i + 1].isdigit()):
            j = i + 1
            while j < n:
                d = text[j]
                if d in "eEpP" and j + 1 < n and text[j + 1] in "+-":
                    j += 2
                elif _is_ident_char(d) or d == ".":
                    j += 1
                elif d == "'" and j + 1 < n and _is_ident_char(text[j + 1]):
                    j += 2  # digit separator
                else:
                    break
            out.tokens.append(Token(NUMBER, text[i:j], lineno(i), "", in_dir))
            i = j
            continue
        for p in _PUNCTS:
            if text.startswith(p, i):
                if p == "<:" and text.startswith("<::", i) and not text.startswith(("<:::", "<::>"), i):
                    p = "<"  # [lex.pptoken]: <:: is < followed by ::
                out.tokens.append(Token(PUNCT, _DIGRAPHS.get(p, p), lineno(i), "", in_dir))
                i += len(p)
                break
        else:
            out.tokens.append(Token(PUNCT, c, lineno(i), "", in_dir))
            i += 1
    return out


def _literal_at(text: str, i: int) -> tuple[str, int, str] | None:
    """If a string/char literal starts at ``i``: (kind, end, content)."""
    for pre in _STRING_PREFIXES:
        if not text.startswith(pre, i):
            continue
        q = i + len(pre)
        if q >= len(text) or text[q] not in "\"'":
            continue
        if pre and i > 0 and _is_ident_char(text[i - 1]):
            return None
        quote = text[q]
        if pre.endswith("R") and quote == '"':
            k = text.find("(", q + 1)
            if k < 0 or k - q - 1 > 16:
                return None
            delim = text[q + 1 : k]
            close = ")" + delim + '"'
            e = text.find(close, k + 1)
            end = len(text) if e < 0 else e + len(close)
            return STRING, end, text[k + 1 : e if e >= 0 else len(text)]
        j = q + 1
        while j < len(text):
            d = text[j]
            if d == "\\":
                j += 2
                continue
            if d == quote or d == "\n":
                break
            j += 1
        end = min(j + 1, len(text)) if j < len(text) and text[j] == quote else j
        return (STRING if quote == '"' else CHAR), end, text[q + 1 : j]
    return None


def _directive(text: str, i: int, lineno, out: Lexed) -> int:
    """Read the preprocessor line starting at ``i`` (at ``#`` or ``%:``); return its end."""
    line = lineno(i)
    i += 1 if text[i] == "#" else 2
    end = text.find("\n", i)
    end = len(text) if end < 0 else end
    # a /* comment */ on a directive line may run past the newline
    j = i
    while j < end:
        if text.startswith("/*", j):
            k = text.find("*/", j + 2)
            if k < 0:
                end = len(text)
                break
            j = k + 2
            if j > end:
                nl = text.find("\n", j)
                end = len(text) if nl < 0 else nl
            continue
        if text.startswith("//", j):
            break
        lit = _literal_at(text, j)
        if lit is not None:
            j = max(lit[1], j + 1)
            continue
        j += 1
    raw = text[i:end]
    body_lexed = tokenize(raw, line_map=None)  # comment-free view of the body for parsing
    stripped = raw.lstrip(" \t")
    k = 0
    while k < len(stripped) and _is_ident_char(stripped[k]):
        k += 1
    name = stripped[:k]
    rest = stripped[k:]
    header: str | None = None
    system = False
    if name in ("include", "include_next", "import", "embed"):
        r = rest.strip()
        if r.startswith("<") and ">" in r:
            header, system = r[1 : r.index(">")], True
        elif r.startswith('"') and r.count('"') >= 2:
            header = r[1 : r.index('"', 1)]
        out.directives.append(Directive(name, rest.strip(), line, header, system))
        return end
    out.directives.append(Directive(name, " ".join(t.text for t in body_lexed.tokens[1:]), line))
    if name != "pragma":
        # tokens of the body (after the directive name) go into the stream, marked
        sub = tokenize(raw, line_map=[lineno(i + p) for p in _line_starts(raw)])
        for t in sub.tokens[1:] if sub.tokens and sub.tokens[0].text == name else sub.tokens:
            out.tokens.append(Token(t.kind, t.text, t.line, t.value, True))
    return end


def _line_starts(raw: str) -> list[int]:
    """Offsets of the start of each line of ``raw`` (a directive body spans one logical line)."""
    starts = [0]
    for k, ch in enumerate(raw):
        if ch == "\n":
            starts.append(k + 1)
    return starts
