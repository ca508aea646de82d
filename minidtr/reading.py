"""Reading files minidtr did not necessarily write: event logs, traces, sweep CSVs.

Whatever a file says, reading it takes bounded memory and time, and a bad file ends
in one error naming the file and the line. Lines are read in chunks, and a reader
stops as soon as a file passes one of three limits:

- ``max_line``: no line longer than this many bytes (default 4 MiB; an event with
  its candidates is under 1 KiB, a trace's line a few KiB at most);
- ``max_bytes``: no file of more than this many bytes, counted after decompression
  for a ``.gz`` trace (default 256 MiB; the bundled traces are under 1 MiB);
- ``max_ratio``: a ``.gz`` file may not expand to more than this many times the
  compressed bytes read (default 100; the bundled traces expand about 11 times),
  once past its first 16 MiB. A gzip bomb is refused in a moment, whatever it
  decompresses to.

The environment variables ``MINIDTR_MAX_LINE`` and ``MINIDTR_MAX_LOG_SIZE`` (byte
counts such as ``64M`` or ``2G``) and ``MINIDTR_MAX_GZIP_RATIO`` (a number) change
them for every reader, the ``minidtr`` command's included; the reading functions
take ``max_line=``, ``max_bytes=`` and ``max_ratio=`` keyword arguments, which win
over both. JSON is parsed one line at a time, and nesting too deep for the parser is
an error on that line, not a ``RecursionError``.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

DEFAULT_MAX_LINE = 4 * 2**20
DEFAULT_MAX_BYTES = 256 * 2**20
DEFAULT_MAX_RATIO = 100.0
RATIO_SLACK = 16 * 2**20  # bytes a .gz file may expand to whatever its ratio
LINE_VARIABLE, SIZE_VARIABLE = "MINIDTR_MAX_LINE", "MINIDTR_MAX_LOG_SIZE"
RATIO_VARIABLE = "MINIDTR_MAX_GZIP_RATIO"
CHUNK = 2**20  # bytes read at a time
MAX_SHOWN = 60  # characters of a value quoted in an error message

ErrorFactory = Callable[[int | None, str], Exception]


@dataclass(frozen=True)
class ReadLimits:
    """The longest line and the largest file (decompressed) a reader accepts, in bytes,
    and how many times its compressed size a ``.gz`` file may expand to."""

    max_line: int = DEFAULT_MAX_LINE
    max_bytes: int = DEFAULT_MAX_BYTES
    max_ratio: float = DEFAULT_MAX_RATIO


def byte_count(text: str, what: str) -> int:
    """``123456``, ``512K``, ``64M``, ``2G`` (powers of 1024) -> a whole number of bytes >= 1."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = units.get(cleaned[-1:], 1)
    try:
        value = float(cleaned[:-1] if cleaned[-1:] in units else cleaned) * scale
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 1:
        raise ValueError(f"{what}: not a byte count >= 1: {text!r} (use e.g. 4M, 2G)")
    return int(value)


def _ratio(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value >= 1:  # NaN fails too; inf turns the check off
        raise ValueError(f"{what}: not a ratio >= 1: {text!r} (use e.g. 1000, or inf)")
    return value


def read_limits(
    max_line: int | None = None, max_bytes: int | None = None, max_ratio: float | None = None
) -> ReadLimits:
    """The limits in force: the arguments given, else the environment's, else the defaults."""
    env = os.environ.get
    if max_line is None:
        given = env(LINE_VARIABLE)
        max_line = DEFAULT_MAX_LINE if given is None else byte_count(given, LINE_VARIABLE)
    if max_bytes is None:
        given = env(SIZE_VARIABLE)
        max_bytes = DEFAULT_MAX_BYTES if given is None else byte_count(given, SIZE_VARIABLE)
    if max_ratio is None:
        given = env(RATIO_VARIABLE)
        max_ratio = DEFAULT_MAX_RATIO if given is None else _ratio(given, RATIO_VARIABLE)
    for name, value in (("max_line", max_line), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number of bytes >= 1, got {value!r}")
    if isinstance(max_ratio, bool) or not isinstance(max_ratio, int | float) or not max_ratio >= 1:
        raise ValueError(f"max_ratio must be a number >= 1, got {max_ratio!r}")
    return ReadLimits(max_line, max_bytes, float(max_ratio))


def shown(value: Any) -> str:
    """``repr(value)`` cut to ``MAX_SHOWN`` characters: a value quoted in a one-line error
    (repr escapes control characters, so nothing reaches a terminal raw)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _cut_at_a_word(message: str, most: int = 3 * MAX_SHOWN) -> str:
    """``message`` whole if short enough, else cut after its last whole word that fits
    (a cut at a fixed length ended Python's message on the digit limit mid-word)."""
    if len(message) <= most:
        return message
    return message[: most - 3].rsplit(" ", 1)[0] + "..."


def printable(text: str) -> str:
    """``text`` with every character a terminal could act on (control characters such as
    ESC, which starts an ANSI escape sequence, line breaks, bidirectional overrides and
    other invisible format characters, lone surrogates) written as a visible escape, the
    way ``repr`` writes it: a name from a file is shown, never obeyed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else _escape(c) for c in text)


def _escape(c: str) -> str:
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


class LineReader:
    """The non-blank lines of a binary stream (every line, with ``blank``), numbered from
    1, as bytes without their newline; ``lines`` is the number of lines read so far
    (blank ones included); ``cut`` turns True as a last line with no line end is given.

    Memory is bounded by ``max_line`` plus one chunk, whatever the file holds; a line
    longer than ``max_line``, more than ``max_bytes`` in all or, from a ``GzipFile``,
    more than ``max_ratio`` times the compressed bytes read raises ``error(line,
    message)`` as soon as it is seen. ``what`` names the file's kind in those messages,
    with its article ("a trace")."""

    def __init__(
        self,
        stream: BinaryIO,
        limits: ReadLimits,
        error: ErrorFactory,
        what: str,
        blank: bool = False,
    ):
        self.stream, self.limits, self.error, self.what = stream, limits, error, what
        self.blank = blank
        self.lines = 0
        self.cut = False
        self.total = 0
        self.compressed = stream.fileobj if isinstance(stream, gzip.GzipFile) else None

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        tail = b""  # the start of a line whose end has not been read yet
        while chunk := self._read():
            if not tail and not self.blank and not chunk.strip():  # blank lines: count, skip
                self.lines += chunk.count(b"\n")
                tail = chunk[chunk.rfind(b"\n") + 1 :]
            else:
                pieces = (tail + chunk).split(b"\n")
                tail = pieces.pop()
                for piece in pieces:
                    self.lines += 1
                    self._check_length(piece, self.lines)
                    if self.blank or piece.strip():
                        yield self.lines, piece
            self._check_length(tail, self.lines + 1)
        if tail:
            self.lines += 1
            self.cut = True
            if self.blank or tail.strip():
                yield self.lines, tail

    def _read(self) -> bytes:
        try:
            chunk = self.stream.read(CHUNK)
        except (OSError, EOFError, zlib.error) as e:
            raise self.error(None, f"cannot be read as {self.what} ({e})") from None
        self.total += len(chunk)
        limits = self.limits
        if self.total > limits.max_bytes:
            unpacked = " once decompressed" if self.compressed is not None else ""
            raise self.error(
                self.lines + 1,
                f"{self.what} of more than {_size(limits.max_bytes)}{unpacked}: "
                f"{SIZE_VARIABLE} or max_bytes= raises the limit",
            )
        if self.compressed is not None and self.total > RATIO_SLACK:
            packed = self.compressed.tell()
            if self.total > limits.max_ratio * packed:
                raise self.error(
                    self.lines + 1,
                    f"{_size(packed)} of gzip expanded to {_size(self.total)}, more than "
                    f"{limits.max_ratio:g} times: a decompression bomb? {RATIO_VARIABLE} "
                    "or max_ratio= raises the limit",
                )
        return chunk

    def _check_length(self, line: bytes, number: int) -> None:
        if len(line) > self.limits.max_line:
            raise self.error(
                number,
                f"a line longer than {_size(self.limits.max_line)}: not {self.what}? "
                f"({LINE_VARIABLE} or max_line= raises the limit)",
            )


def _constant(name: str) -> float:
    return float(name)  # NaN, Infinity, -Infinity: kept, for the field checks to name


_DECODER = json.JSONDecoder(parse_constant=_constant)


def text_line(raw: bytes, number: int, error: ErrorFactory) -> str:
    """A line's bytes as text, or ``error(number, ...)`` for bytes that are not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise error(number, "not text (bytes that are not UTF-8)") from None


def json_line(text: str, number: int, error: ErrorFactory) -> Any:
    """One line's JSON value; ``error(number, ...)`` for what is not JSON and for nesting
    too deep to parse. NaN and Infinity are read as floats, for the caller's checks of
    each field to refuse by name."""
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as e:
        cut = e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated")
        hint = "; truncated?" if cut else ""
        if text.startswith("\ufeff"):  # what some editors put first in a UTF-8 file
            hint = "; it starts with a byte order mark (U+FEFF): save the file without one"
        at = "" if e.msg.endswith(" at") else " at"  # "Unterminated string starting at"
        raise error(number, f"not valid JSON ({e.msg}{at} column {e.colno}){hint}") from None
    except RecursionError:
        raise error(number, "JSON nested too deeply to read") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise error(number, f"not valid JSON ({_cut_at_a_word(printable(str(e)))})") from None
