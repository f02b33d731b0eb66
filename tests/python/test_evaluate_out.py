"""scripts/evaluate with OUT: a measurement beside the protocol gets its tables in its own
directory, and EVALUATION.md is spliced from docs/evaluation only.

Only the table stages run here (no build, no simulation): `splice` with another OUT must be
refused before anything runs, and `tables` must write the same rows from a copy of committed
report.json files as the committed tables read, into OUT and nowhere else.
"""

import os
import shutil
import subprocess

from deploy_support import REPO as ROOT

EVALUATION = ROOT / "docs" / "evaluation"


def evaluate(tmp_path, out, *stages):
    # A `cargo` that fails first on PATH: a stage list that would build stops at the build
    # instead of simulating into docs/evaluation, should the refusal ever come too late.
    fake = tmp_path / "no-cargo"
    fake.mkdir(exist_ok=True)
    (fake / "cargo").write_text("#!/bin/sh\necho 'cargo: not in these tests' >&2\nexit 1\n")
    (fake / "cargo").chmod(0o755)
    env = dict(os.environ, OUT=str(out), PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run([str(ROOT / "scripts" / "evaluate"), *stages], capture_output=True,
                          text=True, cwd=ROOT, env=env, check=False, timeout=60)


def snapshot():
    """EVALUATION.md's text and every file under docs/evaluation with its size and mtime."""
    files = {}
    for d, _, names in os.walk(EVALUATION):
        for n in names:
            st = os.stat(os.path.join(d, n))
            files[os.path.join(d, n)] = (st.st_size, st.st_mtime_ns)
    return (ROOT / "EVALUATION.md").read_text(), files


def row(table, first_cell):
    """The line of a committed or written table whose first cell is `first_cell`."""
    return next(l for l in table.read_text().splitlines() if l.startswith(f"| {first_cell} |"))


def test_splice_into_another_directory_is_refused_before_anything_runs(tmp_path):
    before = snapshot()
    r = evaluate(tmp_path, tmp_path / "elsewhere", "splice")
    assert r.returncode != 0
    assert (f"splice writes EVALUATION.md from docs/evaluation; with OUT={tmp_path / 'elsewhere'} "
            "ask for the tables stage instead") in r.stderr
    assert snapshot() == before
    # With stages that build and simulate first, still refused before any of them.
    r = evaluate(tmp_path, tmp_path / "elsewhere", "held-out", "splice")
    assert r.returncode == 2
    assert (f"splice writes EVALUATION.md from docs/evaluation; with OUT={tmp_path / 'elsewhere'} "
            "ask for the tables stage instead") in r.stderr
    # Refused at the top: nothing built, nothing simulated, nothing written.
    assert "building" not in r.stderr and "held-out:" not in r.stderr
    assert not (tmp_path / "elsewhere").exists()
    assert snapshot() == before


def test_tables_are_written_into_out_from_the_report_files_found_there(tmp_path):
    # One scenario of the second held-out set as a measurement run by hand leaves it
    # (OUT/SET/SCENARIO/report.json, no set report.json), and one shipped trace as the shipped
    # stage does (OUT/shipped-*/report.json).
    out = tmp_path / "out"
    scenario = out / "held-out-2" / "flash-crowds-code"
    scenario.mkdir(parents=True)
    shutil.copy(EVALUATION / "held-out-2" / "flash-crowds-code" / "report.json", scenario)
    shipped = out / "shipped-poisson-azure-code-x2"
    shipped.mkdir()
    shutil.copy(EVALUATION / "shipped-poisson-azure-code-x2" / "report.json", shipped)
    before = snapshot()

    r = evaluate(tmp_path, out, "tables")
    assert r.returncode == 0, r.stderr
    assert "building" not in r.stderr

    written = sorted(p.name for p in out.iterdir() if p.is_file())
    assert written == ["every-row-held-out-2.md", "every-row-shipped.md",
                       "ours-vs-static-held-out-2.md", "ours-vs-static-shipped.md"]
    # The same rows as the committed tables, which come from the same runs.
    for table, first in [("ours-vs-static-held-out-2.md", "flash-crowds-code"),
                         ("every-row-held-out-2.md", "flash-crowds-code"),
                         ("ours-vs-static-shipped.md", "azure-code poisson x2"),
                         ("every-row-shipped.md", "azure-code poisson x2")]:
        assert row(out / table, first) == row(EVALUATION / table, first), table
        assert (out / table).read_text().splitlines()[0] == \
            (EVALUATION / table).read_text().splitlines()[0], table
    # Only those rows: the scenarios not copied have none.
    assert len((out / "every-row-held-out-2.md").read_text().splitlines()) == 3
    assert snapshot() == before


def test_an_unknown_stage_is_refused(tmp_path):
    before = snapshot()
    r = evaluate(tmp_path, EVALUATION, "table")
    assert r.returncode == 2
    assert "unknown stage 'table'" in r.stderr and "tables splice" in r.stderr
    assert snapshot() == before
