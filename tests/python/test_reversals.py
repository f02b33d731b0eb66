"""scripts/reversals: quick reversals of the answered target, counted from decisions files.

A small file built here has its reversals counted by hand; the committed section-110 data must
read as docs/evaluation/proactive.md says; bad input names the file and the fix.
"""

from deploy_support import REPO as ROOT
from script_support import run_script

HEADER = "policy\tseconds\tready\ttarget\treason\texplanation\n"


def table(r):
    """{policy: (changes, reversals, with a settle)} from the script's Markdown table."""
    out = {}
    for line in r.stdout.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[cells[1]] = tuple(int(c) for c in cells[2:5])
    return out


def test_reversals_within_the_window_and_those_with_a_settle(tmp_path):
    tsv = tmp_path / "s-decisions.tsv"
    tsv.write_text(HEADER + "".join(f"{p}\t{t}\t4\t{target}\thold\t{why}\n" for p, t, target, why in [
        ("a", 0, 4, "start"),
        ("a", 50, 6, "one step up to the need"),
        # Down 4 s later, a settle's withdrawal: a reversal with a settle.
        ("a", 54, 4, "no longer needed ... (settle): target 6 -> 4"),
        # Up 6 s later: a reversal again, with the settle of the change before it.
        ("a", 60, 5, "one step up to the need"),
        # Down 30 s later: a reversal, but not within 10 s.
        ("a", 90, 4, "no longer needed (need 4 for 60 s)"),
        # Down again 2 s later: the same direction, no reversal.
        ("a", 92, 3, "scale in"),
        # Another policy's changes are counted apart, though they interleave in time.
        ("b", 0, 2, "start"),
        ("b", 1, 3, "up"),
        ("b", 2, 2, "down"),
    ]))
    r = run_script("reversals", tsv)
    assert r.returncode == 0, r.stderr
    assert table(r) == {"a": (6, 2, 2), "b": (3, 1, 0)}
    # A window of 40 s also takes the change at 90 s.
    assert table(run_script("reversals", "--within", "40", tsv))["a"] == (6, 3, 2)


def test_section_110_counts_from_the_committed_decisions():
    files = sorted((ROOT / "docs" / "evaluation" / "settle-flicker").glob("*/*-decisions.tsv"))
    assert len(files) == 11
    r = run_script("reversals", *files)
    assert r.returncode == 0, r.stderr
    sums = {}
    for line in r.stdout.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        got = sums.setdefault(cells[1], [0, 0])
        got[0] += int(cells[3])
        got[1] += int(cells[4])
    assert sums == {
        "ours:policy=proactive": [26, 21],
        "ours:policy=proactive;settle=steady": [19, 17],
        "ours:policy=proactive;settle=band": [1, 0],
    }


def test_bad_input_names_the_file_and_the_fix(tmp_path):
    missing = tmp_path / "absent.tsv"
    r = run_script("reversals", missing)
    assert r.returncode == 2 and str(missing) in r.stderr and "decisions TSV" in r.stderr
    wrong = tmp_path / "report.md"
    wrong.write_text("| policy | SLO |\n")
    r = run_script("reversals", wrong)
    assert r.returncode == 2 and "header" in r.stderr
    short = tmp_path / "short.tsv"
    short.write_text(HEADER + "a\t1\t2\n")
    r = run_script("reversals", short)
    assert r.returncode == 2 and "line 2 has 3 columns" in r.stderr
    r = run_script("reversals", "--within", "0", short)
    assert r.returncode == 2 and "above 0" in r.stderr
