"""docs/benchmarks.md's current figures are the rendering of the committed store bench/figures/,
and the renderer and bench.run's storing are right on a small store."""

from __future__ import annotations

import json
import re

import pytest

from bench import report, run
from bench.reference.sides import interpreter
from bench.rows import row

RECORD = {
    "at": "2026-12-02T03:28:47+00:00",
    "host": "vm",
    "cpus": 2,
    "load": 4.84,
    "commit": "ee31a7d85cb38f384396ec4e4a55a1e517b8bbb0",
    "changed": ["bench/run.py"],
    "load_after": 4.83,
    "seconds": 1234,
    "argv": ["--only", "validate"],
    "rows": [
        row("row rules, rows/s per core", 2578320, "rows/s", "batches | in memory", "validate"),
        row("sha256 alone", 1755.5, "MB/s", "", "validate"),
    ],
}
PAGE = """# Page

Quoted inline, never a block: `<!-- figures: AREA -->`.

<!-- figures: validate -->
stale text
<!-- /figures -->

middle

<!-- figures: gcs -->
<!-- /figures -->
"""
VALIDATE = """<!-- figures: validate -->
Measured 2026-12-02 03:28 UTC on `vm` (2 CPUs, load average 4.84 at the start, 4.83 at the \
end), commit `ee31a7d` with 1 file changed from it (listed in bench/figures/validate.json): \
`python -m bench.run --only validate`, 1,234 s.

| metric | value | unit | note |
|---|---|---|---|
| row rules, rows/s per core | 2,578,320 | rows/s | batches \\| in memory |
| sha256 alone | 1,755.5 | MB/s |  |
<!-- /figures -->
"""
GCS = """<!-- figures: gcs -->
Not in the store yet: `python -m bench.run --only gcs` measures it.
<!-- /figures -->
"""


def test_the_page_is_the_store_rendered():
    text = report.DOC.read_text()
    assert report.render(text, report.load_store()) == text, (
        "docs/benchmarks.md's figures are not bench/figures/'s: python -m bench.report"
    )


def test_the_page_has_one_block_per_area_of_the_run():
    assert report.OPENING.findall(report.DOC.read_text()) == list(run.AREAS)


def test_the_store_holds_runs_of_the_bench():
    records = report.load_store()
    assert set(records) <= set(run.AREAS)
    for area, record in records.items():
        assert re.fullmatch("[0-9a-f]{40}", record["commit"]), area
        assert record["rows"] and record["seconds"] >= 0 and record["cpus"] >= 1, area
        for r in record["rows"]:
            assert set(r) == {"area", "metric", "value", "unit", "note"}, (area, r)


def test_render_a_small_store(tmp_path):
    report.store_runs({"validate": RECORD}, tmp_path)
    assert json.loads((tmp_path / "validate.json").read_text())["area"] == "validate"
    got = report.render(PAGE, report.load_store(tmp_path))
    stale = "<!-- figures: validate -->\nstale text\n<!-- /figures -->\n"
    empty = "<!-- figures: gcs -->\n<!-- /figures -->\n"
    assert got == PAGE.replace(stale, VALIDATE).replace(empty, GCS)
    assert report.render(got, report.load_store(tmp_path)) == got  # rendering again changes nothing


def test_a_run_that_recorded_its_interpreter_names_it():
    """Runs stored before the interpreter was recorded render as they did (the page test);
    a run that recorded it names it beside the machine."""
    line = "CPython 3.11.7, /opt/py/bin/python3.11, built May 9 2026 07:35:25"
    got = report.provenance_line("validate", {**RECORD, "python": line})
    assert got.startswith(
        "Measured 2026-12-02 03:28 UTC on `vm` (2 CPUs, load average 4.84 at the start, 4.83 "
        f"at the end; {line}), commit `ee31a7d` with 1 file changed"
    )
    assert report.provenance_line("validate", RECORD) in VALIDATE


def test_rows_of_other_areas_get_an_area_column():
    fidelity = row("kernel-docs: [MASK] share", 0.8, "", "reference 0.8001", "fidelity")
    record = {**RECORD, "changed": [], "argv": ["--only", "pipeline", "--pipeline-mb", "5.0"]}
    record["rows"] = [row("kernel-docs: ours", 2.5, "MB/CPU-s", "", "pipeline"), fidelity]
    lines = report.render_area("pipeline", record).splitlines()
    assert lines[0].endswith(
        "commit `ee31a7d`: `python -m bench.run --only pipeline --pipeline-mb 5.0`, 1,234 s."
    )
    assert lines[2:] == [
        "| area | metric | value | unit | note |",
        "|---|---|---|---|---|",
        "| pipeline | kernel-docs: ours | 2.5 | MB/CPU-s |  |",
        "| fidelity | kernel-docs: [MASK] share | 0.8 |  | reference 0.8001 |",
    ]


@pytest.mark.parametrize(
    "page, message",
    [
        ("<!-- figures: gcs -->\nno end\n", "lacks its"),
        ("<!-- figures: gcs -->\n<!-- figures: dask -->\n<!-- /figures -->\n", "lacks its"),
        (GCS + GCS, "gcs appear more than once"),
        (GCS, "no `<!-- figures: AREA -->` block for validate"),
    ],
)
def test_render_refuses_a_page_that_cannot_hold_the_store(page, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        report.render(page, {"validate": {**RECORD, "area": "validate"}})


def test_a_stored_file_names_its_own_area(tmp_path):
    (tmp_path / "gcs.json").write_text(json.dumps({**RECORD, "area": "validate"}))
    with pytest.raises(SystemExit, match="holds area 'validate', not 'gcs'"):
        report.load_store(tmp_path)


def test_check_and_add(tmp_path, capsys):
    page, store = tmp_path / "page.md", tmp_path / "store"
    page.write_text(PAGE)
    args = ["--doc", str(page), "--store", str(store)]
    assert report.main(["--check", *args]) == 1
    bench_json = tmp_path / "bench.json"
    bench_json.write_text(json.dumps({"rows": RECORD["rows"], "runs": {"validate": RECORD}}))
    assert report.main(["--add", str(bench_json), *args]) == 0
    assert VALIDATE in page.read_text() and report.main(["--check", *args]) == 0
    bench_json.write_text(json.dumps({"rows": RECORD["rows"]}))
    with pytest.raises(SystemExit, match="no per-area runs"):
        report.main(["--add", str(bench_json), *args])


def test_bench_run_stores_the_areas_it_ran_and_renders(tmp_path, monkeypatch):
    def fake_area(area, args):
        if area == "gcs":
            raise RuntimeError("emulator down")
        return [row("a figure", 1.5, "x", "", area)]

    monkeypatch.setattr(run, "run_area", fake_area)
    page, store = tmp_path / "page.md", tmp_path / "store"
    page.write_text(PAGE)
    argv = ["--out", str(tmp_path / "b.json"), "--store", str(store), "--doc", str(page)]
    assert run.main(["--only", "validate", "gcs", *argv]) == 1  # gcs failed
    assert sorted(p.name for p in store.iterdir()) == ["validate.json"]
    stored = report.load_store(store)["validate"]
    assert stored["rows"] == [row("a figure", 1.5, "x", "", "validate")]
    assert stored["argv"] == ["--only", "validate"] and len(stored["commit"]) == 40
    assert "| a figure | 1.5 | x |  |" in page.read_text() and GCS in page.read_text()
    assert run.main(["--only", "lddl", "--lddl-mb", "10", *argv[:2], "--no-store"]) == 0
    assert not (store / "lddl.json").exists()
    argv_of = json.loads((tmp_path / "b.json").read_text())["runs"]["lddl"]["argv"]
    assert argv_of == ["--only", "lddl", "--lddl-mb", "10.0"]


def test_scaling_rows_name_the_ratio_and_the_machines_limit():
    from bench.rows import rows_for, scaling_rows

    rows = scaling_rows(rows_for("wikipedia"), "build", {1: 20.0, 2: 12.5}, [21.0, 22.0], "97 MB")
    assert [(r["metric"], r["value"], r["unit"]) for r in rows] == [
        ("build: 2 workers against 1, wall", 1.6, "x"),
        ("build: two 1-worker builds at once", 1.82, "x"),
    ]
    assert rows[0]["note"] == "97 MB: 20.0 s with 1 worker, 12.5 s with 2; target >= 1.8"
    assert all(r["area"] == "wikipedia" for r in rows)


def test_provenance_lists_changed_and_untracked_files_not_ignored_ones(tmp_path, monkeypatch):
    """A figure measured on uncommitted code says so: files changed from the commit and new
    files git does not ignore, from the top of the work tree (paths as `git diff` gives them)."""
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "bench@example.com")
    git("config", "user.name", "bench")
    (tmp_path / "sub").mkdir()
    (tmp_path / "kept.py").write_text("a = 1\n")
    (tmp_path / ".gitignore").write_text("ignored.txt\n")
    git("add", "kept.py", ".gitignore")
    git("commit", "-q", "-m", "first")
    (tmp_path / "kept.py").write_text("a = 2\n")
    (tmp_path / "sub" / "new.py").write_text("b = 1\n")
    (tmp_path / "ignored.txt").write_text("x\n")
    monkeypatch.chdir(tmp_path / "sub")
    got = run.provenance()
    assert got["changed"] == ["kept.py", "sub/new.py"]
    assert got["python"] == interpreter() and got["python"].startswith("CPython 3.")
    assert re.fullmatch("[0-9a-f]{40}", got["commit"])
