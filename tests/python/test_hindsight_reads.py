"""scripts/hindsight-reads: the hindsight's reads of ours' service beside the simulator's count.

Small reports built here check the means and distances against sums done by hand, and the input
errors name the file and the fix.
"""

import json

from script_support import run_script


def reads(*args):
    return run_script("hindsight-reads", *args)


def run(scenario, policy, attainment, fluid=None, counted=None):
    r = {"scenario": scenario, "policy": policy, "seed": 1, "slo_attainment": attainment}
    if fluid is not None:
        r["hindsight"] = {"ours_fluid_percent": fluid, "ours_counted_percent": counted}
    return r


def test_means_and_distances_per_scenario_largest_fluid_distance_first(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps([
        # A crowd: attainment 80 and 70, the model 95 and 93 (+19 on average), the count 75 and
        # 69 (-3).
        run("crowd", "ours", 0.80, 95.0, 75.0),
        run("crowd", "ours", 0.70, 93.0, 69.0),
        # A smooth load: the model reads it 1 above, the count is missing on one seed, one run
        # too short for a comparison.
        run("smooth", "ours", 0.99, 100.0, 99.0),
        run("smooth", "ours", 0.99, 100.0, None),
        run("smooth", "ours", 1.0),
        # Not ours: left out.
        run("crowd", "static:3", 1.0, 100.0, 100.0),
    ]))
    r = reads(report)
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stdout.splitlines() if line.startswith("| crowd") or
             line.startswith("| smooth")]
    assert lines == [
        "| crowd | `ours` | 2 | 75.00 | 94.00 | +19.00 | 2 | 72.00 | -3.00 | 2 |",
        "| smooth | `ours` | 3 | 99.33 | 100.00 | +1.00 | 2 | 99.00 | +0.00 | 1 |",
    ]
    # One policy only, by name.
    only = reads("--policy", "static:3", report)
    assert only.returncode == 0, only.stderr
    assert "| crowd | `static:3` | 1 | 100.00 | 100.00 | +0.00 | 1 | 100.00 | +0.00 | 1 |" \
        in only.stdout


def test_bad_input_names_the_file_and_the_fix(tmp_path):
    missing = reads(tmp_path / "none.json")
    assert missing.returncode == 2
    assert "none.json: cannot read it" in missing.stderr and "report.json" in missing.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": []}')
    r = reads(bad)
    assert r.returncode == 2 and "bad.json: not a list of runs" in r.stderr
    bad.write_text('[{"policy": "ours"}]')
    r = reads(bad)
    assert r.returncode == 2 and "bad.json: run 0 has no scenario" in r.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    r = reads("--policy", "ours:x", empty)
    assert r.returncode == 2 and "no run of `ours:x`" in r.stderr
    assert "Traceback" not in r.stderr
