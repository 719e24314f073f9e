"""`make test`'s runner (tests/run_suite.py): CPU groups balanced by recorded seconds, the durations read back
from pytest's JUnit XML, and pytest's exit 5 (nothing collected) a failure."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import run_suite

ROOT = Path(__file__).resolve().parents[1]


def _files(tmp: Path, sizes: dict[str, int]) -> list[Path]:
    (tmp / "tests").mkdir(exist_ok=True)
    out = []
    for name, size in sizes.items():
        p = tmp / "tests" / name
        p.write_bytes(b"x" * size)
        out.append(p)
    return out


def test_groups_are_balanced_by_recorded_seconds_not_by_size(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(run_suite, "ROOT", tmp_path)
    files = _files(tmp_path, {"test_a.py": 100, "test_b.py": 100, "test_c.py": 100, "test_d.py": 5000})
    seconds = {"tests/test_a.py": 300.0, "tests/test_b.py": 10.0, "tests/test_c.py": 10.0, "tests/test_d.py": 20.0}
    groups = run_suite.split(files, 2, seconds)
    assert sorted(map(sorted, groups)) == [["tests/test_a.py"], ["tests/test_b.py", "tests/test_c.py", "tests/test_d.py"]]
    # By size the big file would go alone and the slow one would share: 320 s against 20 s.
    assert run_suite.split(files, 2, {}) != groups


def test_a_file_not_recorded_is_weighed_by_its_size_at_the_recorded_rate(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(run_suite, "ROOT", tmp_path)
    files = _files(tmp_path, {"test_a.py": 1000, "test_new.py": 3000})
    w = run_suite.weights(files, {"tests/test_a.py": 10.0})
    assert w == {"tests/test_a.py": 10.0, "tests/test_new.py": 30.0}


def test_durations_are_read_from_junit_xml(tmp_path: Path) -> None:
    xml = tmp_path / "g.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="tests.test_a" name="t1" time="1.5"/>'
                   '<testcase classname="tests.test_a" name="t2" time="2.0"/>'
                   '<testcase classname="tests.test_b" name="t" time="0.25"/></testsuite></testsuites>')
    assert run_suite.file_seconds([xml, tmp_path / "missing.xml"]) == {"tests/test_a.py": 3.5, "tests/test_b.py": 0.25}


def test_the_suite_ends_with_what_it_skipped_and_why(tmp_path: Path) -> None:
    xml = tmp_path / "g.xml"
    xml.write_text('<testsuites><testsuite><testcase classname="tests.test_a" name="t1" time="1">'
                   '<skipped type="pytest.skip" message="needs /usr/bin/chromium">x</skipped></testcase>'
                   '<testcase classname="tests.test_a" name="t2" time="1">'
                   '<skipped type="pytest.skip" message="needs /usr/bin/chromium">x</skipped></testcase>'
                   '<testcase classname="tests.test_b" name="t" time="1">'
                   '<skipped type="pytest.skip" message="Skipped: ../shared/corpus is absent">x</skipped></testcase>'
                   '<testcase classname="tests.test_b" name="u" time="1"/></testsuite></testsuites>')
    reasons = run_suite.skipped([xml, tmp_path / "missing.xml"])
    assert reasons == {"needs /usr/bin/chromium": 2, "../shared/corpus is absent": 1}
    lines = run_suite.skip_summary(reasons)
    assert lines[0] == "make test: 3 tests skipped:" and lines[1].endswith("2 × needs /usr/bin/chromium")
    assert "apt" not in lines[-1] and ".ci/run" in lines[-1]
    assert run_suite.skip_summary({}) == ["make test: nothing skipped"]


def test_a_run_that_collects_no_test_fails() -> None:
    """pytest exits 5 when nothing is collected: in every group here (a -k that matches no test) that is exit 1."""
    r = subprocess.run([sys.executable, "tests/run_suite.py", "-k", "no_test_is_named_like_this_xyzzy"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "make test: no tests were collected in" in r.stderr
