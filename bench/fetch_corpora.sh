#!/usr/bin/env bash
# Fetch real English text for the benchmarks and the realistic tests.
#
#   bench/fetch_corpora.sh [DATA_DIR]      (default: data/)
#
# Uses only the package registries (Debian apt and PyPI); everything else works offline.
# Idempotent: a step whose output already exists is skipped, so a second run does nothing.
#
#   DATA_DIR/debian/linux-doc/usr/share/doc/linux-doc-6.1/Documentation/**/*.rst.gz
#       the Linux kernel documentation (reStructuredText), Debian package linux-doc-6.1
#   DATA_DIR/debian/python-doc/usr/share/info/python3.11.info.gz
#       the Python 3.11 manual as a GNU info file (and its rst sources under usr/share/doc),
#       Debian package python3.11-doc
#   DATA_DIR/gensim/
#       gensim 4.4.0's test data (small Wikipedia XML dumps, text corpora), from its PyPI wheel
#
# Environment: PYTHON (default .venv/bin/python, else python3) runs pip and unpacks the wheel.
set -euo pipefail

DATA_DIR="${1:-data}"
PYTHON="${PYTHON:-}"
if [[ -z "$PYTHON" ]]; then
    if [[ -x .venv/bin/python ]]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
DEB_DIR="$DATA_DIR/debian"
mkdir -p "$DEB_DIR/debs" "$DATA_DIR/gensim"

say() { printf 'fetch_corpora: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# apt_download PACKAGE: put PACKAGE_*.deb into $DEB_DIR/debs, refreshing apt's lists only if needed.
apt_download() {
    local pkg="$1"
    if compgen -G "$DEB_DIR/debs/${pkg}_*.deb" >/dev/null; then return 0; fi
    command -v apt-get >/dev/null \
        || die "apt-get not found; $pkg comes from Debian's archive (bookworm). Download" \
               "${pkg}_*.deb by hand into $DEB_DIR/debs/ and run this script again."
    say "downloading Debian package $pkg"
    if ! (cd "$DEB_DIR/debs" && apt-get download "$pkg"); then
        say "apt-get download $pkg failed; refreshing the package lists (apt-get update)"
        if [[ "$(id -u)" -eq 0 ]]; then apt-get update -qq; else sudo apt-get update -qq; fi \
            || die "apt-get update failed; run it as root, then run this script again."
        (cd "$DEB_DIR/debs" && apt-get download "$pkg") \
            || die "could not download $pkg with apt-get; is the Debian archive reachable?"
    fi
}

# apt_extract PACKAGE DEST MARKER: unpack the package into DEST unless DEST/MARKER exists.
apt_extract() {
    local pkg="$1" dest="$2" marker="$3"
    if [[ -e "$dest/$marker" ]]; then
        say "$pkg: already in $dest"
        return 0
    fi
    apt_download "$pkg"
    local deb
    deb="$(ls "$DEB_DIR/debs/${pkg}"_*.deb | sort -V | tail -n 1)"
    say "unpacking $(basename "$deb") into $dest"
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial"
    dpkg -x "$deb" "$dest.partial"
    [[ -e "$dest.partial/$marker" ]] \
        || die "$deb does not contain $marker; the package layout changed, update this script."
    rm -rf "$dest"
    mv "$dest.partial" "$dest"
}

fetch_gensim_data() {
    local dest="$DATA_DIR/gensim" marker="$DATA_DIR/gensim/.complete"
    if [[ -e "$marker" ]]; then
        say "gensim test data: already in $dest"
        return 0
    fi
    local wheels="$DATA_DIR/wheels"
    mkdir -p "$wheels"
    if ! compgen -G "$wheels/gensim-4.4.0-*.whl" >/dev/null; then
        say "downloading the gensim 4.4.0 wheel (only its test data is used)"
        # Any platform's wheel carries the same data: fall back to a manylinux one.
        "$PYTHON" -m pip download gensim==4.4.0 --no-deps --only-binary=:all: -d "$wheels" -q \
            || "$PYTHON" -m pip download gensim==4.4.0 --no-deps --only-binary=:all: -d "$wheels" \
                -q --platform manylinux_2_28_x86_64 --python-version 3.11 \
                --implementation cp --abi cp311 \
            || die "pip could not download gensim==4.4.0; is PyPI reachable?"
    fi
    local wheel
    wheel="$(ls "$wheels"/gensim-4.4.0-*.whl | head -n 1)"
    say "unpacking gensim/test/test_data from $(basename "$wheel") into $dest"
    "$PYTHON" - "$wheel" "$dest" <<'PY'
import shutil
import sys
import zipfile
from pathlib import Path

wheel, dest = sys.argv[1], Path(sys.argv[2])
prefix = "gensim/test/test_data/"
count = 0
with zipfile.ZipFile(wheel) as zf:
    for info in zf.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        target = dest / info.filename[len(prefix):]
        target.parent.mkdir(parents=True, exist_ok=True)
        with zf.open(info) as src, open(target, "wb") as out:
            shutil.copyfileobj(src, out)
        count += 1
if count == 0:
    sys.exit(f"{wheel} holds no {prefix} files; pick a gensim wheel that ships its tests")
print(f"fetch_corpora: {count} files", file=sys.stderr)
PY
    touch "$marker"
}

apt_extract linux-doc-6.1 "$DEB_DIR/linux-doc" usr/share/doc/linux-doc-6.1/Documentation
apt_extract python3.11-doc "$DEB_DIR/python-doc" usr/share/info/python3.11.info.gz
fetch_gensim_data

say "done: kernel docs in $DEB_DIR/linux-doc/usr/share/doc/linux-doc-6.1/Documentation"
