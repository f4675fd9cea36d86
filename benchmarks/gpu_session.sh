#!/usr/bin/env bash
# The GPU checks of a machine with an NVIDIA GPU and CuPy, in parts that each fit in a few
# minutes, every log and JSON written under $OUT (default: ./gpu-results).
#
#   benchmarks/gpu_session.sh stage        # where ../shared/data exists: copy the files the
#                                          # checks read into .gpudata/ (about 41 MB), for a
#                                          # machine that has the checkout but not the data
#   benchmarks/gpu_session.sh tests        # the gpu-marked tests and the CuPy-parametrised ones
#   benchmarks/gpu_session.sh iterations   # bench_gpu.py: time per iteration and per kernel
#   benchmarks/gpu_session.sh eps          # bench_gpu.py: time to eps against LinearSVC
#   benchmarks/gpu_session.sh all          # the three in turn
#
# On the GPU machine, .gpudata/ (when present and ../shared/data is not) is linked as
# ../shared/data, where the tests and benchmarks read their data.  Both .gpudata/ and
# gpu-results/ are ignored by git (a tool that copies the checkout must be told to take
# .gpudata/ along).  PYTHON selects the interpreter (default: python3).  Nothing is
# installed: the checkout runs as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-results}
FILES="a9a/a9a a9a/a9a.t imdb/imdb_tfidf_unigram.train.svm.gz
news20/news20bydate_binary_uni+bigram.train.svm.gz"

data() {
    if [ ! -d ../shared/data ]; then
        if [ -d .gpudata ]; then
            mkdir -p ../shared
            ln -sfn "$PWD/.gpudata" ../shared/data
        else
            echo "no data: ../shared/data is missing and so is .gpudata (run '$0 stage' where" \
                 "the data is)" >&2
            exit 2
        fi
    fi
}

case "${1:-}" in
stage)
    for f in $FILES; do
        mkdir -p ".gpudata/$(dirname "$f")"
        cp "../shared/data/$f" ".gpudata/$f"
    done
    du -sh .gpudata
    ;;
tests)
    data
    mkdir -p "$OUT"
    "$PY" -c "import cupy; print(cupy.cuda.runtime.getDeviceProperties(0)['name'], cupy.__version__)" \
        | tee "$OUT/device.txt"
    set -o pipefail
    PYTHONUNBUFFERED=1 "$PY" -m pytest -q -n 0 -p no:cacheprovider -m gpu tests 2>&1 \
        | tee "$OUT/gpu_tests.log"
    ;;
iterations)
    data
    mkdir -p "$OUT"
    PYTHONUNBUFFERED=1 "$PY" benchmarks/bench_gpu.py --parts iterations,kernels \
        --json "$OUT/bench_gpu_iterations.json" 2>&1 | tee "$OUT/bench_gpu_iterations.log"
    ;;
eps)
    data
    mkdir -p "$OUT"
    PYTHONUNBUFFERED=1 "$PY" benchmarks/bench_gpu.py --parts eps \
        --json "$OUT/bench_gpu_eps.json" 2>&1 | tee "$OUT/bench_gpu_eps.log"
    ;;
all)                                    # every part, even after one fails; fails if any did
    status=0
    for part in tests iterations eps; do
        "$0" "$part" || status=1
    done
    exit $status
    ;;
*)
    sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
