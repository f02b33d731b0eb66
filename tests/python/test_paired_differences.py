"""scripts/paired-differences: per-seed differences between two policies, per scenario and group.

Checked on hand-made rows, a `simulate --json` report and a per-seed table, so the test needs no
simulation; bad input must be refused with an error naming the file or the group.
"""

import json
import xml.dom.minidom

from script_support import run_script


def run(*args):
    return run_script("paired-differences", *args)


def report(scenario, policy, seed, attainment, gpu):
    return {"scenario": scenario, "policy": policy, "seed": seed,
            "slo_attainment": attainment, "gpu_hours": gpu}


def test_differences_are_paired_by_seed_in_each_group(tmp_path):
    # JSON group: the variant spends 1 GPU-h less on seed 1 and 3 less on seed 2, and gains
    # 1 point on seed 2; seed 3 has no variant row and is left out.
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([
        report("bursts", "a", 1, 0.90, 10.0), report("bursts", "b", 1, 0.90, 9.0),
        report("bursts", "a", 2, 0.90, 12.0), report("bursts", "b", 2, 0.91, 9.0),
        report("bursts", "a", 3, 0.90, 12.0),
        report("flat", "a", 1, 1.0, 5.0), report("flat", "b", 1, 1.0, 5.0),
    ]))
    # Table group: the same pair under other names, one seed each.
    table = tmp_path / "per-seed.tsv"
    table.write_text("bursts\tbase\t1\t90.00\t10.00\t0\t0.5\n"
                     "bursts\tvariant\t1\t90.00\t10.50\t0\t0.5\n")
    svg = tmp_path / "d.svg"
    r = run("--group", "json", "a", "b", runs, "--group", "tsv", "base", "variant", table,
            "--svg", svg)
    assert r.returncode == 0, r.stderr
    assert "| bursts | json | 2 | +0.50 (0.71) | -2.00 (1.41) | 2 |" in r.stdout
    assert "| bursts | tsv | 1 | +0.00 (0.00) | +0.50 (0.00) | 1 |" in r.stdout
    assert "| flat | json | 1 | +0.00 (0.00) | +0.00 (0.00) | 0 |" in r.stdout
    # The plot has a dot per seed of the scenarios that differ (bursts: 2 + 1), none for flat.
    doc = xml.dom.minidom.parse(str(svg))
    assert len(doc.getElementsByTagName("circle")) == 3
    assert "flat" not in svg.read_text()


def test_bad_input_is_refused_naming_it(tmp_path):
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps([report("bursts", "a", 1, 0.9, 10.0)]))
    r = run("--group", "g", "a", "b", runs)
    assert r.returncode == 2
    assert "group g: a and b share no scenario and seed" in r.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps([report("bursts", "a", 1, 0.8, 10.0),
                                 report("bursts", "b", 1, 0.8, 10.0)]))
    r = run("--group", "g", "a", "b", runs, other)
    assert r.returncode == 2
    assert "other.json: a on bursts seed 1 disagrees with another file of group g" in r.stderr
    bad = tmp_path / "bad.tsv"
    bad.write_text("bursts\ta\tone\t90\t10\n")
    r = run("--group", "g", "a", "b", bad)
    assert r.returncode == 2
    assert "bad.tsv:1: expected scenario, policy, seed" in r.stderr
    r = run("--group", "g", "a", "b", tmp_path / "missing.json")
    assert r.returncode == 2
    assert "missing.json" in r.stderr
    r = run("--group", "g", "a", "b")
    assert r.returncode == 2
    assert "expected NAME BASE VARIANT FILE" in r.stderr
