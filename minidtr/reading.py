"""Reading files minidtr did not necessarily write: event logs, traces, sweep CSVs.

Whatever a file says, reading it takes bounded memory and time, and a bad file ends
in one error naming the file and the line. Lines are read in chunks, so no line
longer than ``max_line`` bytes and no file of more than ``max_bytes`` bytes
(counted after decompression, for a ``.gz`` trace) is ever held or read in full:
past either limit the reader stops at once. JSON is parsed one line at a time,
and nesting too deep for the parser is an error on that line, not a
``RecursionError``.

The limits default to ``DEFAULT_MAX_LINE`` and ``DEFAULT_MAX_BYTES``; the
environment variables ``MINIDTR_MAX_LINE`` and ``MINIDTR_MAX_LOG_SIZE`` (a byte
count such as ``64M`` or ``2G``) raise or lower them for every reader, and the
reading functions take ``max_line=`` and ``max_bytes=`` keyword arguments, which
win over both.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

DEFAULT_MAX_LINE = 4 * 2**20  # bytes: an event with its candidates is under 1 KiB
DEFAULT_MAX_BYTES = 512 * 2**20  # bytes: the bundled traces are under 1 MiB each
LINE_VARIABLE, SIZE_VARIABLE = "MINIDTR_MAX_LINE", "MINIDTR_MAX_LOG_SIZE"
CHUNK = 2**20  # bytes read at a time
MAX_SHOWN = 60  # characters of a value quoted in an error message

ErrorFactory = Callable[[int | None, str], Exception]


@dataclass(frozen=True)
class ReadLimits:
    """The longest line and the largest file (decompressed) a reader accepts, in bytes."""

    max_line: int = DEFAULT_MAX_LINE
    max_bytes: int = DEFAULT_MAX_BYTES


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


def read_limits(max_line: int | None = None, max_bytes: int | None = None) -> ReadLimits:
    """The limits in force: the arguments given, else the environment's, else the defaults."""
    if max_line is None:
        given = os.environ.get(LINE_VARIABLE)
        max_line = DEFAULT_MAX_LINE if given is None else byte_count(given, LINE_VARIABLE)
    if max_bytes is None:
        given = os.environ.get(SIZE_VARIABLE)
        max_bytes = DEFAULT_MAX_BYTES if given is None else byte_count(given, SIZE_VARIABLE)
    for name, value in (("max_line", max_line), ("max_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number of bytes >= 1, got {value!r}")
    return ReadLimits(max_line, max_bytes)


def shown(value: Any) -> str:
    """``repr(value)`` cut to ``MAX_SHOWN`` characters: a value quoted in a one-line error
    (repr escapes control characters, so nothing reaches a terminal raw)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


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
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


class LineReader:
    """The non-blank lines of a binary stream (every line, with ``blank``), numbered from
    1, as bytes without their newline; ``lines`` is the number of lines read so far
    (blank ones included).

    Memory is bounded by ``max_line`` plus one chunk, whatever the file holds; a line
    longer than ``max_line``, or more than ``max_bytes`` in all, raises ``error(line,
    message)`` as soon as it is seen. ``what`` names the file's kind in those messages."""

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
        self.total = 0

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
            if self.blank or tail.strip():
                yield self.lines, tail

    def _read(self) -> bytes:
        try:
            chunk = self.stream.read(CHUNK)
        except (OSError, EOFError, zlib.error) as e:
            raise self.error(None, f"cannot be read as a {self.what} ({e})") from None
        self.total += len(chunk)
        if self.total > self.limits.max_bytes:
            raise self.error(
                self.lines + 1,
                f"the {self.what} holds more than {_size(self.limits.max_bytes)} "
                f"(decompressed); {SIZE_VARIABLE} or max_bytes= raises the limit",
            )
        return chunk

    def _check_length(self, line: bytes, number: int) -> None:
        if len(line) > self.limits.max_line:
            raise self.error(
                number,
                f"a line longer than {_size(self.limits.max_line)}: not a {self.what}? "
                f"({LINE_VARIABLE} or max_line= raises the limit)",
            )


def _constant(name: str) -> float:
    return float(name)  # NaN, Infinity, -Infinity: kept, for the field checks to name


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
        return json.loads(text, parse_constant=_constant)
    except json.JSONDecodeError as e:
        raise error(number, f"not valid JSON ({e.msg}); truncated?") from None
    except RecursionError:
        raise error(number, "JSON nested too deeply to read") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise error(number, f"not valid JSON ({str(e)[:MAX_SHOWN]})") from None
