"""scripts/warm-rows against the evaluation's committed rows.

The cold table must read as EVALUATION.md does (its numbers come from the same report.json
files), a warm directory from docs/evaluation/ must give its own rows and criteria, and a
missing directory must be refused with an error that names it.
"""

import json
import os
import shutil
import subprocess
import sys

from deploy_support import REPO as ROOT
from script_support import run_script

WARM = ROOT / "docs" / "evaluation" / "demand-history" / "gap-held-out"


def warm_rows(tmp_path, *runs):
    md, svg = tmp_path / "rows.md", tmp_path / "rows.svg"
    r = run_script("warm-rows", md, svg, *runs)
    return r, md, svg


def test_cold_rows_read_as_the_evaluation_and_a_warm_run_has_its_own(tmp_path):
    r, md, svg = warm_rows(tmp_path, f"an hour apart={WARM}")
    assert r.returncode == 0, r.stderr
    text = md.read_text()
    cold, warm = text.split("**an hour apart** (warm)")
    # EVALUATION.md, round 77's default after proactive.md section 113's fix: 11 of the 65
    # held-out and shipped seeds dominated cold; working-day-conv at 1.30x the clairvoyant plan;
    # three peers dominate the flash crowd on the means; batch-bursts-code at 16.42 GPU-h (16.44
    # before the fix, 15.95 under round 75's default, 16.95 before that).
    assert "Seeds a static fleet dominates: 11 of 65." in cold
    assert "| working-day-conv | 100.00 | 13.45 | 1.30 | 0 of 5 | none |" in cold
    assert ("| flash-crowd-conv | 77.58 | 7.08 | 1.80 | 0 of 5 | `prometheus-keda-tuned`, `kpa`, "
            "`apa` |") in cold
    assert "| batch-bursts-code | 92.59 | 16.42 | 1.36 | 5 of 5 |" in cold
    assert "shipped traces: shipped-azure-code-x2, shipped-azure-conv-x10" in cold
    # proactive.md section 71: an hour between the days, 2 of 65 seeds dominated, and
    # slow-ramp-conv at 1.19x.
    assert "Seeds a static fleet dominates: 2 of 65." in warm
    assert "| slow-ramp-conv | 100.00 | 7.88 | 1.19 | 0 of 5 | none |" in warm
    drawn = svg.read_text()
    assert drawn.startswith("<svg") and drawn.count("<rect") > 2 * 13
    assert "shipped-mooncake-x0.5: " in drawn


def test_a_missing_run_is_refused_with_its_path(tmp_path):
    r, md, _ = warm_rows(tmp_path, f"nowhere={tmp_path / 'absent'}")
    assert r.returncode == 2
    assert str(tmp_path / "absent" / "working-day-conv" / "report.json") in r.stderr
    assert "run the scenario first" in r.stderr
    assert not md.exists()
    r, _, _ = warm_rows(tmp_path, "no-equals-sign")
    assert r.returncode == 2 and "usage" in r.stderr


def test_rows_not_judged_against_static_fleets_are_refused(tmp_path):
    # A warm run made with `simulate --no-static-judging` names no dominating fleet because it
    # looked for none: its rows must not be counted as undominated.
    warm = tmp_path / "warm"
    shutil.copytree(WARM, warm)
    report = warm / "steps-mooncake" / "report.json"
    rows = json.loads(report.read_text())
    for row in rows:
        if row["policy"] == "ours":
            row.pop("dominated_by_static", None)
            row["statics_not_judged"] = True
    report.write_text(json.dumps(rows))
    r, md, _ = warm_rows(tmp_path, f"unjudged={warm}")
    assert r.returncode == 2
    assert "steps-mooncake" in r.stderr and "--no-static-judging" in r.stderr
    assert not md.exists()


def test_cold_rows_alone_from_another_directory(tmp_path):
    # COLD=DIR: the cold rows of a measurement beside the protocol (OUT=DIR scripts/evaluate),
    # here a copy of the protocol's reports with working-day-conv's five seeds marked
    # dominated, so the table must be read from the copy and not from docs/evaluation.
    evaluation = ROOT / "docs" / "evaluation"
    cold = tmp_path / "cold"
    for report in ["held-out", "held-out-2", "shipped-poisson-azure-code-x2",
                   "shipped-poisson-azure-conv-x10", "shipped-poisson-mooncake-x0.5"]:
        (cold / report).mkdir(parents=True)
        shutil.copy(evaluation / report / "report.json", cold / report / "report.json")
    report = cold / "held-out" / "report.json"
    rows = json.loads(report.read_text())
    for row in rows:
        if row["policy"] == "ours" and row["scenario"] == "working-day-conv":
            row["dominated_by_static"] = [{"replicas": 3, "slo_attainment": 1.0, "gpu_hours": 12.0}]
    report.write_text(json.dumps(rows))
    md, svg = tmp_path / "rows.md", tmp_path / "rows.svg"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "warm-rows"), str(md), str(svg)],
                       capture_output=True, text=True, cwd=ROOT, check=False,
                       env=dict(os.environ, COLD=str(cold)))
    assert r.returncode == 0, r.stderr
    text = md.read_text()
    assert "(warm)" not in text
    assert "Seeds a static fleet dominates: 16 of 65." in text
    assert "| working-day-conv | 100.00 | 13.45 | 1.30 | 5 of 5 | none |" in text
    assert "never dominated: working-day-conv, flash-crowd-conv" in text
