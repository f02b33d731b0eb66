"""Reads simulation results for the scripts beside it: `simulate --json` reports and per-seed
tables.

A report is a JSON list of runs, each an object with at least scenario, policy, seed,
slo_attainment (a share, 0 to 1) and gpu_hours, and usually requests, flaps and
gpu_hours_withdrawn. A per-seed table (as `scripts/training-round` writes) has one
tab-separated line per run: scenario, policy, seed, SLO attainment %, GPU-hours, and then
flaps and the GPU-hours of start-ups withdrawn before they served, where the table has them.
Blank lines are skipped.

`read` yields one `Row` per run or line, in file order, and raises `InputError` on the first
thing it cannot read, with a message that names the file, the line or run, and what is
expected. The messages name the file by its path and never quote its contents. Checks that
depend on what a script does with the rows (ranges, duplicates, request counts) are left to
the script.

The scripts run from any directory and import this module from their own:

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import report_rows
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterator, Optional


class InputError(Exception):
    """An input the scripts cannot read; the message names the file and the fix."""


@dataclass(frozen=True)
class Row:
    """One run of one policy on one scenario and seed."""

    where: str  # "path:line" for a table, "path: run i" for a report (i from 0)
    scenario: str
    policy: str
    seed: int
    share: float  # SLO attainment, 0 to 1
    percent: float  # SLO attainment in points: a table's number as written, a report's x 100
    gpu_hours: float
    requests: Optional[int]  # from a report; None when absent and from a table
    flaps: Optional[int]
    withdrawn: Optional[float]  # GPU-hours of start-ups withdrawn before they served
    report: bool  # True when read from a `simulate --json` report, False from a table


TABLE_FIELDS = "scenario, policy, seed, SLO attainment %, GPU-hours"


@dataclass(frozen=True)
class Table:
    """How the lines of a per-seed table are read.

    At least `min_fields` and at most `max_fields` (None: any number) tab-separated fields
    must be present. With `flaps`, the sixth field is the run's flaps and must be a whole
    number, and a seventh, where present, the withdrawn GPU-hours and must be a number;
    without it, those fields are taken when they read as numbers and are otherwise None. With
    `header`, any line whose first field is "scenario" is skipped as a header. `shape` is the
    message for a line with too few or too many fields (it may use {got}, the number of
    fields), `numbers` the message for one whose numbers do not read; each follows
    "path:line: "."""

    min_fields: int = 5
    max_fields: Optional[int] = None
    flaps: bool = False
    header: bool = False
    shape: str = f"expected at least 5 tab-separated cells ({TABLE_FIELDS}), got {{got}}"
    numbers: str = "seed, SLO attainment % and GPU-hours must be numbers"


# How a report is told from a table: by the file's first non-blank character being "[" (a
# JSON list), by the file name ending in ".json", or never (tables only).
BY_CONTENT = "content"
BY_NAME = "name"
TABLES_ONLY = None


def read(path: str, table: Table = Table(), reports: Optional[str] = BY_CONTENT,
         requests: bool = False) -> Iterator[Row]:
    """The rows of one file, in file order. `reports` says how a report is recognised (see
    BY_CONTENT, BY_NAME, TABLES_ONLY); with `requests`, every run of a report must give its
    request count."""
    give = ("give a `simulate --json` report or a per-seed table" if reports
            else "give a per-seed table")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror}); {give}") from e
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text; {give}") from e
    if reports == BY_NAME:
        is_report = path.endswith(".json")
    elif reports == BY_CONTENT:
        is_report = text.lstrip().startswith("[")
    else:
        is_report = False
    if is_report:
        return read_report(path, text, requests)
    return read_table(path, text, table)


def read_report(path: str, text: str, requests: bool = False) -> Iterator[Row]:
    """The runs of a `simulate --json` report whose text is `text`."""
    try:
        runs = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON (line {e.lineno}): give a `simulate --json` "
                         "report") from e
    if not isinstance(runs, list):
        raise InputError(f"{path}: expected a JSON list of runs, as `simulate --json` writes")
    return _runs(path, runs, requests)


def _runs(path, runs, requests):
    needed = ("scenario, policy, seed, requests, slo_attainment and gpu_hours" if requests
              else "scenario, policy, seed, slo_attainment and gpu_hours")
    for i, run in enumerate(runs):
        where = f"{path}: run {i}"
        if not isinstance(run, dict):
            raise InputError(f"{where}: expected an object with {needed}, as `simulate --json` "
                             "writes")

        def field(name, convert):
            value = _field(run, name, convert)
            if value is None:
                raise InputError(f"{where}: missing or malformed field {name!r}: not a "
                                 f"`simulate --json` report; each run needs {needed}")
            return value

        scenario, policy = field("scenario", str), field("policy", str)
        seed = field("seed", int)
        count = field("requests", int) if requests else _field(run, "requests", int)
        share, gpu_hours = field("slo_attainment", float), field("gpu_hours", float)
        yield Row(where, scenario, policy, seed, share, 100 * share, gpu_hours, count,
                  _field(run, "flaps", int), _field(run, "gpu_hours_withdrawn", float), True)


def _field(run, name, convert):
    """run[name] converted, or None where it is missing or does not convert."""
    try:
        return convert(run[name])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None


def read_table(path: str, text: str, table: Table = Table()) -> Iterator[Row]:
    """The lines of a per-seed table whose text is `text`, read as `table` says."""
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cells = line.split("\t")
        if table.header and cells[0] == "scenario":
            continue
        where = f"{path}:{n}"
        if len(cells) < table.min_fields or (table.max_fields is not None
                                             and len(cells) > table.max_fields):
            raise InputError(f"{where}: " + table.shape.format(got=len(cells)))
        try:
            seed = int(cells[2])
            percent = float(cells[3])
            gpu_hours = float(cells[4])
            if table.flaps:
                flaps = int(cells[5])
                withdrawn = float(cells[6]) if len(cells) > 6 else None
            else:
                flaps = _cell(cells, 5, int)
                withdrawn = _cell(cells, 6, float)
        except (ValueError, IndexError) as e:
            raise InputError(f"{where}: " + table.numbers.format(got=len(cells))) from e
        yield Row(where, cells[0], cells[1], seed, percent / 100, percent, gpu_hours, None,
                  flaps, withdrawn, False)


def _cell(cells, i, convert):
    try:
        return convert(cells[i])
    except (IndexError, ValueError):
        return None
