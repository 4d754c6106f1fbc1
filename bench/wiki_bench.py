"""Wikipedia reading throughput, per core, on the real exports gensim 4.4.0 ships.

Measured on `enwiki-latest-pages-articles1...-shortened` (206 pages, 6.1 MB of XML, in
DATA/gensim: `make corpora`), repeated in memory `--repeat` times so that each timing runs for
seconds. The reader's figures are per CPU-second of this one-threaded process (MB/CPU-s,
pages/CPU-s); the whole builds', per wall second, per CPU-second of their process tree, or per
wall second per worker, each unit saying which. MB are 10^6 bytes.
- reader + cleaner: XML bytes -> documents (`read_wikipedia`), in MB of decompressed XML per
  CPU-second, pages per CPU-second and MB of prose written per CPU-second;
- its parts: page splitting and XML parsing alone (`iter_pages`), rendering alone
  (`render_wikitext`), and mwparserfromhell's own tree + `strip_code` on the same wikitext (what
  rendering from the token stream replaces);
- bz2 decompression (`DecompressingReader`), the bound on a single reader of a dump that has
  no multistream index;
- the whole build (`bert-shards build`, DirectRunner) on `--copies` copies of the export with
  distinct page ids, in MB of XML per wall second per worker and per CPU-second of the process
  tree: reading, rendering, Punkt, vocab, tokenizing, instances and shards together. With the
  vocab reused, 2 workers against 1 from two builds of each count taken in turn, each count's
  fastest kept.

    python -m bench.wiki_bench [--data DATA] [--repeat 5] [--copies 32] [--workers 2] [--no-build]
"""

from __future__ import annotations

import argparse
import bz2
import gc
import io
import json
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # per-core figures; before `tokenizers` loads
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import mwparserfromhell  # noqa: E402

from bench.rows import in_turn, rows_for, scaling_rows  # noqa: E402
from pipeline.sources.compressed import DecompressingReader  # noqa: E402
from pipeline.sources.documents import Tally  # noqa: E402
from pipeline.sources.wikipedia.pages import iter_pages  # noqa: E402
from pipeline.sources.wikipedia.reader import read_wikipedia  # noqa: E402
from pipeline.sources.wikipedia.render import render_wikitext  # noqa: E402

PYTHON_GC_THRESHOLD = (700, 10, 10)  # CPython's default
ARTICLES = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


# Units: the reader's timings are CPU seconds of this one-threaded process; a whole build's rate
# per worker is of wall seconds (start-up included), its rate per CPU-second of its whole tree.
PER_CPU_S = "MB/CPU-s"
PAGES_PER_CPU_S = "pages/CPU-s"
PER_WALL_S_PER_WORKER = "MB/wall-s/worker"


def gensim_file(name: str, data: str | os.PathLike = "data") -> bytes:
    """A file of gensim's test data under DATA/gensim (`make corpora` fetches it there)."""
    path = Path(data) / "gensim" / name
    if not path.is_file():
        raise SystemExit(f"{path}: missing; fetch gensim's test data first: make corpora")
    return path.read_bytes()


row = rows_for("wikipedia")


def cpu_seconds(fn) -> tuple[float, object]:
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def repeated(xml: bytes, times: int) -> bytes:
    """The export's pages `times` over, inside one header and closing tag."""
    first = xml.index(b"<page>")
    last = xml.rindex(b"</page>") + len(b"</page>")
    return xml[:first] + xml[first:last] * times + xml[last:]


def distinct_copies(xml: bytes, copies: int) -> bytes:
    """`copies` copies whose page ids differ (copy k adds k * 10^8), so documents stay distinct."""
    first = xml.index(b"<page>")
    last = xml.rindex(b"</page>") + len(b"</page>")
    pages, out = xml[first:last], []
    for k in range(copies):
        out.append(
            re.sub(
                rb"(<page>\s*<title>[^<]*</title>\s*<ns>\d+</ns>\s*<id>)(\d+)",
                lambda m, k=k: m.group(1) + str(int(m.group(2)) + k * 10**8).encode(),
                pages,
            )
        )
    return xml[:first] + b"\n".join(out) + xml[last:]


def reader_rows(compressed: bytes, repeat: int) -> list[dict]:
    xml = bz2.decompress(compressed)
    data = repeated(xml, repeat)
    mb, pages = len(data) / 1e6, data.count(b"<page>")
    tally = Tally()
    secs, docs = cpu_seconds(lambda: list(read_wikipedia(io.BytesIO(data), "bench", tally)))
    prose = sum(len(p.encode()) for d in docs for p in d.paragraphs) / 1e6
    note = f"{mb:.0f} MB XML, {pages} pages ({len(docs)} articles kept), {secs:.1f} s CPU"
    cpu = PER_CPU_S
    rows = [
        row("reader + cleaner", round(mb / secs, 2), cpu, note + ", decompressed XML"),
        row(
            "reader + cleaner: pages",
            round(pages / secs),
            PAGES_PER_CPU_S,
            "all namespaces, redirects",
        ),
        row("reader + cleaner: prose out", round(prose / secs, 2), cpu, "UTF-8 text"),
    ]
    split_s, articles = cpu_seconds(lambda: list(iter_pages(io.BytesIO(data), "b", Tally())))
    rows.append(row("page split + XML parse alone", round(mb / split_s, 1), cpu, "XML"))
    wikitext = [a.wikitext for a in articles]
    wiki_mb = sum(len(t.encode()) for t in wikitext) / 1e6
    render_s, _ = cpu_seconds(lambda: [render_wikitext(t, Tally()) for t in wikitext])
    note = f"{wiki_mb:.0f} MB of article wikitext"
    rows.append(row("render (token stream) alone", round(wiki_mb / render_s, 2), cpu, note))
    sample = wikitext[: max(1, len(wikitext) // repeat)]
    sample_mb = sum(len(t.encode()) for t in sample) / 1e6
    tree_s, _ = cpu_seconds(lambda: [mwparserfromhell.parse(t).strip_code() for t in sample])
    note = "mwparserfromhell.parse + strip_code, for comparison (keeps tables, lists, headings)"
    rows.append(row("render (node tree) alone", round(sample_mb / tree_s, 2), cpu, note))
    packed = bz2.compress(data, 9)
    bz_s, _ = cpu_seconds(lambda: _drain(DecompressingReader(io.BytesIO(packed), "bz2", "b")))
    note = "one reader of a dump without multistream index"
    rows.append(row("bz2 decompression", round(mb / bz_s, 1), cpu, note))
    return rows


def _drain(f) -> int:
    n = 0
    while chunk := f.read(1 << 20):
        n += len(chunk)
    return n


def build_rows(compressed: bytes, copies: int, workers: int, rounds: int = 2) -> list[dict]:
    """The whole build: training its vocab, then reusing that vocab (the steady state that a large
    corpus approaches: vocab training reads a bounded sample, once), `rounds` times each with
    `workers` and, when that is not 1, with 1 worker too; beside them, the floor of what any build
    must do with the rendered prose: split and tokenize. Each build is a `bert-shards build` process
    of its own, as a user runs it; both CPU counts include its start-up and Beam's, so the corpus
    must be large enough (`copies`) for that to weigh little: 32 copies are 195 MB of XML, about the
    200 MB of the `pipeline` area's builds. (On half as many copies, start-up, the changes
    between stages and the ending alone held 2 workers well under the target:
    docs/benchmarks.md.)"""
    xml = distinct_copies(bz2.decompress(compressed), copies)
    mb, rows = len(xml) / 1e6, []
    with tempfile.TemporaryDirectory(prefix="bench-wiki-") as tmp:
        (Path(tmp) / "wiki").mkdir()
        (Path(tmp) / "wiki" / "enwiki-copies.xml").write_bytes(xml)
        inputs, reused = f"wikipedia:{tmp}/wiki", ["--vocab", f"{tmp}/out/vocab.txt"]
        wall, _, manifest = _build(inputs, f"{tmp}/out", workers, [])
        rows += _build_rows(manifest, mb, copies, workers, wall, "")

        # With the vocab reused, `rounds` builds per worker count, taken in turn (2, 1, 2, 1),
        # each count's fastest kept (`in_turn`).
        def reused_build(w: int, k: int) -> tuple[float, float, dict]:
            out = f"{tmp}/out-{w}-{k}"
            built = _build(inputs, out, w, reused)
            shutil.rmtree(out)
            return built

        tries = in_turn(reused_build, (workers, 1), rounds)
        cpus, walls = {}, {}
        for w, runs in tries.items():
            wall, cpu, manifest = min(runs, key=lambda r: r[0])
            rows += _build_rows(manifest, mb, copies, w, wall, ", vocab reused")
            cpus[w], walls[w] = cpu, wall
        if 1 in walls and 2 in walls:
            pair = side_by_side(inputs, tmp, reused)
            what = f"{mb:.0f} MB XML, vocab reused"
            each = {w: [r[0] for r in runs] for w, runs in tries.items()}
            rows += scaling_rows(row, "whole build, vocab reused", walls, pair, what, each)
        floor = split_tokenize_floor(xml, f"{tmp}/out/vocab.txt")
    note = "Punkt + the tokenizer (1 thread) on the rendered prose, per MB of XML"
    rows.append(row("floor: split + tokenize", round(mb / floor, 3), "MB/CPU-s", note))
    for w, cpu in sorted(cpus.items()):
        note = f"{mb:.0f} MB XML, {cpu:.0f} CPU-s of the process tree"
        name = f"whole build, vocab reused, {w} worker(s)"
        rows.append(row(f"{name}, per CPU-s", round(mb / cpu, 3), "MB/CPU-s", note))
        rows.append(row(f"{name}: times the floor's time", round(cpu / floor, 2), "x"))
    return rows


def split_tokenize_floor(xml: bytes, vocab: str) -> float:
    """CPU seconds of Punkt and the tokenizer alone on the articles' rendered paragraphs."""
    from pipeline.core.sentences import split_paragraphs
    from pipeline.core.tokenize import bert_tokenizer
    from schemas.vocab import Vocab

    docs = list(read_wikipedia(io.BytesIO(xml), "bench", Tally()))
    tok = bert_tokenizer(Vocab.load(vocab), True)

    def work():
        for d in docs:
            tok.encode_batch_fast(split_paragraphs(list(d.paragraphs)), add_special_tokens=False)

    # The floor is Punkt and the tokenizer as Python runs them by default (a build's steps raise
    # the collector's threshold of the process that runs them: `pipeline.stages.base`).
    saved = gc.get_threshold()
    gc.set_threshold(*PYTHON_GC_THRESHOLD)
    try:
        return cpu_seconds(work)[0]
    finally:
        gc.set_threshold(*saved)


def side_by_side(inputs: str, tmp: str, extra: list[str]) -> list[float]:
    """Wall seconds of two 1-worker builds of `inputs` started together: what two processes get
    out of this machine's cores, the most 2 workers of one build can get."""
    outs = [f"{tmp}/pair-{k}" for k in (0, 1)]
    with ThreadPoolExecutor(2) as pool:
        walls = list(pool.map(lambda out: _build(inputs, out, 1, extra)[0], outs))
    return walls


def _build(inputs: str, out: str, workers: int, extra: list[str]) -> tuple[float, float, dict]:
    """Wall and CPU seconds (the process tree) of one build, run as `bert-shards build` is: in a
    process of its own. A second build inside this process could not fork its workers (the
    first one's gRPC threads remain, `pipeline.runners.local_workers.fork_is_safe`), so Beam
    would start each as a fresh interpreter that imports everything again while the first stage
    waits."""
    from bench.procmem import run_measured

    cmd = [sys.executable, "-m", "pipeline", "build", "--input", inputs, "--out", out]
    cmd += ["--workers", str(workers), *extra]
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    try:
        measured = run_measured(cmd, env)
    except RuntimeError as e:
        raise SystemExit(f"the build failed: {str(e).splitlines()[-1]}") from None
    return measured.wall, measured.cpu, json.loads(Path(f"{out}/manifest.json").read_text())


def _build_rows(manifest, mb, copies, workers, wall, label) -> list[dict]:
    counts = manifest["counts"]["total"]
    instances = sum(s["rows"] for s in manifest["shards"])
    note = (
        f"{mb:.0f} MB XML ({copies} copies), {counts['documents_used']} articles, "
        f"{instances} instances, dupe 5, {wall:.0f} s wall incl. start-up"
    )
    name = f"whole build, {workers} worker(s){label}"
    return [
        row(name, round(mb / wall / workers, 3), PER_WALL_S_PER_WORKER, note),
        row(name + ": instances", round(instances / wall), "/s wall"),
    ]


def run(
    data: str = "data",
    repeat: int = 5,
    copies: int = 32,
    workers: int = 2,
    whole_build: bool = True,
) -> list:
    compressed = gensim_file(ARTICLES, data)
    rows = reader_rows(compressed, repeat)
    if whole_build:
        rows += build_rows(compressed, copies, workers)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--data", default=os.environ.get("DATA", "data"), help="where make corpora put gensim/"
    )
    ap.add_argument("--repeat", type=int, default=5, help="in-memory repeats of the export")
    ap.add_argument("--copies", type=int, default=32, help="copies for the whole-build figure")
    ap.add_argument("--workers", type=int, default=2, help="local workers for the whole build")
    ap.add_argument("--no-build", action="store_true", help="reader figures only")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    rows = run(args.data, args.repeat, args.copies, args.workers, not args.no_build)
    for r in rows:
        print(f"{r['metric']:<42} {r['value']:>10} {r['unit']:<10} {r['note']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
