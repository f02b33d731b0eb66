"""scripts/split-at: the part of a simulated run after a cut, from the run and its prefix.

The arithmetic is checked on hand-made `simulate --json` rows (the script's --from-json path), so
the test needs no simulation; bad input must be refused with an error naming the file.
"""

import json

from script_support import run_script


def run(*args):
    return run_script("split-at", *args)


def report(policy, seed, attainment, requests, gpu):
    return {"policy": policy, "seed": seed, "slo_attainment": attainment,
            "requests": requests, "gpu_hours": gpu}


def two_runs(tmp_path, ours_first, ours_missed):
    """A run's prefix and the whole run, ours and static:3, one seed: ours misses
    ours_first * 1000 of the 1000 requests before the cut and ours_missed of 4000 in all;
    static:3 misses none before and 30 in all."""
    first = tmp_path / "first.json"
    whole = tmp_path / "whole.json"
    first.write_text(json.dumps([report("ours", 1, ours_first, 1000, 3.0),
                                 report("static:3", 1, 1.0, 1000, 2.25)]))
    whole.write_text(json.dumps([report("ours", 1, 1 - ours_missed / 4000, 4000, 11.0),
                                 report("static:3", 1, 1 - 30 / 4000, 4000, 9.0)]))
    return first, whole


def test_the_part_after_the_cut_is_the_whole_minus_the_prefix(tmp_path):
    # ours: 100 of 1000 requests missed before the cut, 110 of 4000 in all -> 10 of 3000 after.
    # static:3: nothing missed before, 30 of 4000 in all -> 30 of 3000 after.
    first, whole = two_runs(tmp_path, 0.9, 110)
    r = run("--from-json", first, whole)
    assert r.returncode == 0, r.stderr
    assert "| `ours` | 90.00 / 3.00 | 99.67 / 8.00 | 97.25 / 11.00 | 25.0 % | 90.9 % |" in r.stdout
    assert "| `static:3` | 100.00 / 2.25 | 99.00 / 6.75 | 99.25 / 9.00 | 25.0 % | 0.0 % |" in r.stdout


def test_runs_that_do_not_match_are_refused(tmp_path):
    first = tmp_path / "first.json"
    whole = tmp_path / "whole.json"
    first.write_text(json.dumps([report("ours", 1, 0.9, 1000, 3.0)]))
    whole.write_text(json.dumps([report("ours", 1, 0.9, 1000, 3.0),
                                 report("ours", 2, 0.9, 1000, 3.0)]))
    r = run("--from-json", first, whole)
    assert r.returncode == 2
    assert "seeds [2] are in the whole run but not in the first part" in r.stderr
    whole.write_text("not json")
    r = run("--from-json", first, whole)
    assert r.returncode == 2
    assert str(whole) in r.stderr and "not a `simulate --json` output" in r.stderr
    assert "not json" not in r.stderr
    # A "first part" that misses more than the whole run is not its prefix.
    first, whole = two_runs(tmp_path, 0.5, 110)
    r = run("--from-json", first, whole)
    assert r.returncode == 2 and "is not that run's prefix" in r.stderr
    r = run("batch-bursts-conv", "soon", "ours")
    assert r.returncode == 2 and "CUT_SECONDS 'soon' is not a number" in r.stderr


def test_the_plot_draws_both_parts_of_every_policy(tmp_path):
    import xml.dom.minidom

    first, whole = two_runs(tmp_path, 0.6, 400)
    plot = tmp_path / "split.svg"
    r = run("--svg", plot, "--from-json", first, whole)
    assert r.returncode == 0, r.stderr
    doc = xml.dom.minidom.parse(str(plot))
    texts = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.firstChild]
    # Two bars per policy, each labelled with its attainment and GPU-hours.
    for label in ["60.00 % / 3.00", "100.00 % / 8.00", "100.00 % / 2.25", "99.00 % / 6.75"]:
        assert label in texts, texts
    assert "ours" in texts and "static:3" in texts
    r = run("--svg", tmp_path / "missing" / "split.svg", "--from-json", first, whole)
    assert r.returncode == 2 and "cannot write it" in r.stderr
