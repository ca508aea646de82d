"""A sweep's CSV: each result appended as it arrives (``CsvLog``), read back by a
resumed sweep (``read_csv``), stamped with the replay settings so that two
experiments never mix; and plain tables of rows as CSV (``write_rows``)."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..reading import MAX_SHOWN, LineReader, printable, read_limits, shown, text_line
from ..runtime.options import RuntimeOptions
from .simulator import ADDRESS_COLUMNS, REPLAY_SETTINGS, SimResult

# What a sweep's CSV stamp always names (with ``thrash``): what ``minidtr sim`` sets. Other
# settings are named only where they differ from their defaults, so the stamps of earlier
# sweeps of the command line still match.
STAMPED = ("dealloc", "keep_dead_remats", "min_size", "rebuild_orphans", "sample")


def options_stamp(options: RuntimeOptions, thrash: float | None) -> str:
    """The replays' settings as a stable string, stored with every CSV row so that
    ``resume`` never mixes results of different settings. The heuristic is a column; the
    settings a replay does not use (cost, device, the live thrash guards) are not named."""
    defaults = RuntimeOptions()
    stamp = {"thrash": thrash}
    for name in REPLAY_SETTINGS:
        value = getattr(options, name)
        if name in STAMPED or (name != "heuristic" and value != getattr(defaults, name)):
            stamp[name] = value
    return json.dumps(stamp, sort_keys=True, default=str)


class CsvLog:
    """Appends one row per result and flushes it, so the file is whole after any stop
    but one mid-write (a full disk), whose cut row a resumed sweep drops and replays."""

    def __init__(self, path, stamp: str, append: bool, header: list[str]):
        fresh = True
        if append and os.path.exists(path):
            fresh = _drop_cut_row(path) == 0
        self.file = open(path, "w" if fresh else "a", newline="")  # noqa: SIM115
        self.extra = [name for name in ADDRESS_COLUMNS if name in header]
        self.writer = csv.DictWriter(self.file, fieldnames=header)
        self.stamp = stamp
        if fresh:
            self.writer.writeheader()
            self.file.flush()

    def write(self, result: SimResult) -> None:
        row = {name: getattr(result, name) for name in CSV_FIELDS}
        row.update({name: result.extra.get(name) for name in self.extra})
        with naming_the_file(self.file.name):
            self.writer.writerow({**row, "options": self.stamp})
            self.file.flush()

    def close(self) -> None:
        with naming_the_file(self.file.name):
            self.file.close()


@contextlib.contextmanager
def naming_the_file(path: str | os.PathLike) -> Iterator[None]:
    """An OSError writing ``path`` names it (a full disk's does not)."""
    try:
        yield
    except OSError as error:
        if error.filename is None and error.errno is not None:
            raise OSError(error.errno, error.strerror, os.fspath(path)) from None
        raise


def _drop_cut_row(path) -> int:
    """Cut the file after its last line end (what follows is a row cut mid-write); its
    length now."""
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        while end > 0:
            start = max(0, end - 65536)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        f.truncate(end)
    return end


CSV_FIELDS = tuple(f.name for f in dataclasses.fields(SimResult) if f.name != "extra")


class SweepCsvError(ValueError):
    """A sweep CSV that is not one (``--resume`` reads it): names the file and the line."""


def read_csv(
    path: str | os.PathLike,
    stamp: str | None = None,
    *,
    header: Sequence[str] | None = None,
    max_line: int | None = None,
    max_bytes: int | None = None,
) -> list[SimResult]:
    """The results in a sweep's CSV (those written with options ``stamp``, if given).

    The file is read within ``minidtr.reading``'s limits (``max_line``, ``max_bytes``);
    a row that is not a sweep's (a field of the wrong type, too many or too few fields,
    a field longer than the csv module's limit) is a ``SweepCsvError`` naming the file
    and the line. With ``header`` (what a resumed sweep would append under), the file's
    columns must be those, in that order, and a last row with no line end (cut by a
    stop mid-write) is left out: the resumed sweep replays it."""
    source = os.fspath(path)

    def error(line: int | None, message: str) -> SweepCsvError:
        return SweepCsvError(f"{source}:{line}: {message}" if line else f"{source}: {message}")

    results = []
    with open(source, "rb") as f:
        lines = LineReader(f, read_limits(max_line, max_bytes), error, "a sweep CSV", blank=True)
        reader = csv.DictReader(text_line(raw, n, error) + "\n" for n, raw in lines)
        try:
            columns = reader.fieldnames or []
            if not {"trace", "heuristic", "ratio"} <= set(columns):
                raise error(1, "not a sweep CSV (its header lacks trace, heuristic, ratio)")
            if header is not None and list(columns) != list(header):
                raise ValueError(
                    f"{error(1, _other_columns(columns, header))}; write to a new file"
                )
            for row in reader:
                if header is not None and lines.cut:
                    break
                results.append(_csv_result(row, lines.lines, error, stamp))
        except csv.Error as e:
            raise error(lines.lines, f"not a sweep CSV ({e})") from None
    return results


def _other_columns(columns: Sequence[str], header: Sequence[str]) -> str:
    missing = [name for name in header if name not in columns]
    extra = [name for name in columns if name not in header]
    if not missing and not extra:
        return "its columns are this sweep's in another order"
    parts = [
        f"lacks {', '.join(missing)}" if missing else "",
        f"adds {', '.join(extra)}" if extra else "",
    ]
    return "its columns are not this sweep's: it " + " and ".join(p for p in parts if p)


_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(SimResult)}


def _csv_result(row: dict, line: int, error: Callable, stamp: str | None) -> SimResult:
    """One row of a sweep's CSV as a ``SimResult``."""
    if None in row or None in row.values():
        raise error(line, "a row with more or fewer fields than the header")
    if stamp is not None and row.get("options") != stamp:  # a usage error, not a bad file
        raise ValueError(
            f"{error(line, 'results of other simulate options')} "
            f"({_stamp_difference(row.get('options'), stamp)}); write to a new file"
        )
    values: dict[str, Any] = {}
    for name in CSV_FIELDS:
        text, kind = row.get(name), _FIELD_TYPES[name]
        try:
            if text is None or (text == "" and "None" in kind):
                values[name] = None
            elif kind.startswith("int"):
                values[name] = int(text)
            elif kind.startswith("float"):
                values[name] = float(text)
            else:
                values[name] = text
        except ValueError:
            raise error(line, f"the field {name!r} must be a number, got {shown(text)}") from None
    extra: dict[str, Any] = {}
    for name in ADDRESS_COLUMNS:  # the contiguous fit's measures, when the sweep had them
        text = row.get(name)
        if text:
            try:
                extra[name] = float(text) if name == "fragmentation" else int(text)
            except ValueError:
                raise error(
                    line, f"the field {name!r} must be a number, got {shown(text)}"
                ) from None
    return SimResult(**values, extra=extra)


def _stamp_difference(written: str | None, stamp: str) -> str:
    """What differs between a row's options and this sweep's, setting by setting."""
    try:
        old = json.loads(written or "")
    except ValueError:
        old = None
    if not isinstance(old, dict):
        return f"{shown(written)}, now {stamp}"
    new = json.loads(stamp)
    names = sorted(set(old) | set(new))
    return ", ".join(
        f"{printable(name)[:MAX_SHOWN]} {printable(json.dumps(old.get(name)))[:MAX_SHOWN]} "
        f"there, {json.dumps(new.get(name))} now"
        for name in names
        if old.get(name) != new.get(name)
    )


def write_csv(results: Sequence[SimResult], path: str | os.PathLike) -> None:
    """Results as a CSV (no results: the header alone)."""
    write_rows([r.row() for r in results], path, [*CSV_FIELDS] if not results else None)


def write_rows(
    rows: Sequence[dict], path: str | os.PathLike, columns: Sequence[str] | None = None
) -> None:
    """Rows of dicts as a CSV, with ``columns`` (default: the first row's keys) as its
    header."""
    if columns is None:
        if not rows:
            raise ValueError("write_rows: no rows, and no columns for the header")
        columns = list(rows[0])
    with naming_the_file(path), open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(columns))
        writer.writeheader()
        writer.writerows(rows)
