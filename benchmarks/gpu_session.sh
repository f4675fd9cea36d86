#!/usr/bin/env bash
# The first GPU hour in one command: every step of benchmarks/gpu_session.py, each in at most
# 10 minutes, every output under $OUT (default ./gpu-results), a pass/fail summary at the end.
#
#   benchmarks/gpu_session.sh                 # on a machine with an NVIDIA GPU and CuPy
#   benchmarks/gpu_session.sh --emulated      # the same steps, the emulated runtime for CuPy
#   benchmarks/gpu_session.sh parity eps      # some steps only (then the summary)
#   benchmarks/gpu_session.sh stage           # where ../shared/data exists: copy the files the
#                                             # steps read into .gpudata/ (about 40 MB)
#
# Steps: env compile tests parity sanitizer iterations eps profile while scale (see gpu_session.py).  A step whose
# OUT/<step>.json exists is skipped (the session resumes); FORCE=1 runs it again.  Needs
# Python with numpy, scipy, scikit-learn, numba and pytest (CuPy for the GPU); nothing is
# installed, nothing is written outside the checkout, no network.  PYTHON selects the
# interpreter (default: python3).  Exit status: 0 when every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-results}
STEP_LIMIT=${STEP_LIMIT:-600}
FILES="a9a/a9a a9a/a9a.t imdb/imdb_tfidf_unigram.train.svm.gz
news20/news20bydate_binary_uni+bigram.train.svm.gz"

if [ "${1:-}" = "stage" ]; then
    for f in $FILES; do
        mkdir -p ".gpudata/$(dirname "$f")"
        cp "../shared/data/$f" ".gpudata/$f"
    done
    du -sh .gpudata
    exit 0
fi

EMU=()
STEPS=()
for arg in "$@"; do
    case "$arg" in
    --emulated) EMU=(--emulated) ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) STEPS+=("$arg") ;;
    esac
done
[ ${#STEPS[@]} -eq 0 ] && STEPS=(env compile tests parity sanitizer iterations eps profile while scale)
if [ ${#EMU[@]} -eq 1 ] && [ "$OUT" = "$PWD/gpu-results" ]; then
    OUT=$PWD/gpu-results/emulated
fi
if [ -z "${GPUSVM_DATA:-}" ]; then
    if [ -d .gpudata ]; then export GPUSVM_DATA=$PWD/.gpudata; else export GPUSVM_DATA=$PWD/../shared/data; fi
fi
mkdir -p "$OUT"
export PYTHONPATH="$PWD:$PWD/emulator${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
for step in "${STEPS[@]}"; do
    if [ -f "$OUT/$step.json" ] && [ -z "${FORCE:-}" ]; then
        echo "[$step] done before ($OUT/$step.json): skipped (FORCE=1 runs it again)"
        continue
    fi
    rm -f "$OUT/$step.json"
    echo "[$step] running (at most ${STEP_LIMIT} s), log: $OUT/$step.log"
    timeout "$STEP_LIMIT" "$PY" benchmarks/gpu_session.py --out "$OUT" "${EMU[@]}" "$step" \
        > "$OUT/$step.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && echo "[$step] stopped after ${STEP_LIMIT} s" | tee -a "$OUT/$step.log"
    tail -n 1 "$OUT/$step.log"
done
"$PY" benchmarks/gpu_session.py --out "$OUT" "${EMU[@]}" summary | tee "$OUT/summary.txt"
exit "${PIPESTATUS[0]}"
