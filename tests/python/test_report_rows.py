"""scripts/report_rows.py: the one reader of `simulate --json` reports and per-seed tables that
scripts/paired-differences, scripts/miss-price and scripts/judge-round share.

Checked on hand-made files: both formats read to the same rows, the options each script uses
(a header line, flaps as a required sixth field, reports told by name or by content), and bad
input refused with a message that names the file and the line or run but not its contents.
"""

import json
import sys

import pytest

from deploy_support import REPO

sys.path.insert(0, str(REPO / "scripts"))
import report_rows  # the scripts' reader, imported from scripts/ as the scripts do
from report_rows import InputError, Table


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def run(scenario, policy, seed, share, gpu_hours, **more):
    return dict(scenario=scenario, policy=policy, seed=seed, slo_attainment=share,
                gpu_hours=gpu_hours, **more)


def test_a_table_and_a_report_read_to_the_same_rows(tmp_path):
    table = write(tmp_path, "per-seed.tsv",
                  "s\tours\t1\t90.5\t2.25\t3\t0.5\n\n"
                  "s\tstatic:2\t1\t100.00\t2.00\t0\n")
    report = write(tmp_path, "report.json", json.dumps([
        run("s", "ours", 1, 0.905, 2.25, requests=3600, flaps=3, gpu_hours_withdrawn=0.5),
        run("s", "static:2", 1, 1.0, 2.0, requests=3600, flaps=0)]))
    rows = list(report_rows.read(table))
    runs = list(report_rows.read(report))
    assert [r.where for r in rows] == [f"{table}:1", f"{table}:3"]
    assert [r.where for r in runs] == [f"{report}: run 0", f"{report}: run 1"]
    for r, j in zip(rows, runs):
        assert (r.scenario, r.policy, r.seed, r.flaps) == (j.scenario, j.policy, j.seed, j.flaps)
        assert r.share == pytest.approx(j.share) and r.percent == pytest.approx(j.percent)
        assert r.gpu_hours == j.gpu_hours
        assert not r.report and j.report
    # A table's attainment is kept as written; its share is that over 100.
    assert rows[0].percent == 90.5 and rows[0].share == 0.905
    assert rows[0].withdrawn == 0.5 and rows[1].withdrawn is None
    assert runs[0].withdrawn == 0.5 and runs[1].withdrawn is None
    assert rows[0].requests is None and runs[0].requests == 3600


def test_how_a_report_is_told_from_a_table(tmp_path):
    text = json.dumps([run("s", "ours", 1, 0.9, 1.0, requests=10)])
    named = write(tmp_path, "r.json", text)
    unnamed = write(tmp_path, "r.txt", "\n  " + text)
    assert [r.seed for r in report_rows.read(unnamed, reports=report_rows.BY_CONTENT)] == [1]
    assert [r.seed for r in report_rows.read(named, reports=report_rows.BY_NAME)] == [1]
    # By name, a report not named .json is read as a table, and refused as one.
    with pytest.raises(InputError, match=r"r\.txt:2: expected at least 5 tab-separated cells"):
        list(report_rows.read(unnamed, reports=report_rows.BY_NAME))
    with pytest.raises(InputError, match=r"r\.json:1: expected at least 5"):
        list(report_rows.read(named, reports=report_rows.TABLES_ONLY))


def test_a_header_line_is_skipped_only_when_asked(tmp_path):
    table = write(tmp_path, "t.tsv", "scenario\tpolicy\tseed\tSLO %\tGPU-h\ns\tp\t2\t50\t1\n")
    assert [r.seed for r in report_rows.read(table, Table(header=True))] == [2]
    with pytest.raises(InputError, match=r"t\.tsv:1: seed, SLO attainment % and GPU-hours"):
        list(report_rows.read(table))


def test_flaps_are_required_only_when_asked(tmp_path):
    strict = Table(min_fields=6, max_fields=7, flaps=True, shape="six or seven, got {got}",
                   numbers="six or seven numbers")
    table = write(tmp_path, "t.tsv", "s\tp\t1\t50\t1\tmany\n")
    # Read leniently, a flaps field that is not a whole number reads as None.
    assert [r.flaps for r in report_rows.read(table)] == [None]
    with pytest.raises(InputError, match=r"t\.tsv:1: six or seven numbers"):
        list(report_rows.read(table, strict))
    table = write(tmp_path, "t.tsv", "s\tp\t1\t50\t1\t0\t0.5\t8\n")
    with pytest.raises(InputError, match=r"t\.tsv:1: six or seven, got 8"):
        list(report_rows.read(table, strict))


def test_bad_input_names_the_file_and_the_place_but_not_the_contents(tmp_path):
    table = write(tmp_path, "bad.tsv", "s\tp\t1\t50\t1\ns\tp\tsecret-seed\t50\t1\n")
    with pytest.raises(InputError) as e:
        list(report_rows.read(table))
    assert str(e.value) == f"{table}:2: seed, SLO attainment % and GPU-hours must be numbers"
    report = write(tmp_path, "bad.json", json.dumps([
        run("s", "p", 1, 0.5, 1.0, requests=5), run("s", "p", "secret-seed", 0.5, 1.0)]))
    with pytest.raises(InputError) as e:
        list(report_rows.read(report))
    message = str(e.value)
    assert message.startswith(f"{report}: run 1: missing or malformed field 'seed'")
    assert "secret" not in message
    # A report's request counts, where asked for, must be there.
    report = write(tmp_path, "counts.json", json.dumps([
        run("s", "p", 1, 0.5, 1.0, requests=5), run("s", "p", 2, 0.5, 1.0)]))
    assert [r.requests for r in report_rows.read(report)] == [5, None]
    with pytest.raises(InputError, match=r"run 1: missing or malformed field 'requests'"):
        list(report_rows.read(report, requests=True))
    with pytest.raises(InputError, match=r"not JSON \(line 1\)"):
        list(report_rows.read(write(tmp_path, "j.json", "[secret"), reports=report_rows.BY_NAME))
    with pytest.raises(InputError, match=r"expected a JSON list of runs"):
        list(report_rows.read(write(tmp_path, "d.json", "{}"), reports=report_rows.BY_NAME))
    with pytest.raises(InputError, match=r"run 0: expected an object"):
        list(report_rows.read(write(tmp_path, "i.json", "[1]")))
    missing = str(tmp_path / "missing.tsv")
    with pytest.raises(InputError, match=r"missing\.tsv: cannot read \(No such file"):
        report_rows.read(missing)
    binary = tmp_path / "binary.tsv"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(InputError, match=r"binary\.tsv: not UTF-8 text"):
        report_rows.read(str(binary))
