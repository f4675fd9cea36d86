#!/usr/bin/env bash
# The first GPU hour in one command: every step of benchmarks/gpu_session.py, each in at most
# 10 minutes, every output under $OUT (default ./gpu-results), a pass/fail summary at the end.
#
#   benchmarks/gpu_session.sh                 # on a machine with an NVIDIA GPU and CuPy
#   benchmarks/gpu_session.sh --emulated      # the same steps, the emulated runtime for CuPy
#   benchmarks/gpu_session.sh parity eps      # some steps only (then the summary)
#   benchmarks/gpu_session.sh stage           # where ../shared/data exists: copy the files the
#                                             # steps read into .gpudata/ (about 40 MB), and
#                                             # liblinear-multicore into .whl/
#   benchmarks/gpu_session.sh all             # the GPU session as one call of at most 570 s
#                                             # (docs/gpu.md, "The next GPU session")
#   benchmarks/gpu_session.sh rehearse        # the same plan at small sizes on the emulator
#   benchmarks/gpu_session.sh plan 1          # the session in two parts of 360 s
#   benchmarks/gpu_session.sh plan 2          # and 300 s
#
# Steps: env compile tests parity sanitizer iterations eps profile while scale (see gpu_session.py).  A step whose
# OUT/<step>.json exists is skipped (the session resumes); FORCE=1 runs it again.  Needs
# Python with numpy, scipy, scikit-learn, numba and pytest (CuPy for the GPU); nothing is
# installed, nothing is written outside the checkout (but by `plan`, below), no network.  PYTHON selects the
# interpreter (default: python3).  Exit status: 0 when every step passed.
set -uo pipefail
SELF="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/gpu-results}
STEP_LIMIT=${STEP_LIMIT:-600}
FILES="a9a/a9a a9a/a9a.t imdb/imdb_tfidf_unigram.train.svm.gz
news20/news20bydate_binary_uni+bigram.train.svm.gz"
#: wheels `stage` fetches for the GPU machine (pip download, cp312 manylinux x86-64); none
#: needed today: its image has numpy, scipy, scikit-learn and numba
STAGE_WHEELS=${STAGE_WHEELS:-}
MC_VERSION=2.50.0

# ---------------------------------------------------------------- plan: the 15-minute session
# `gpu_session.sh plan 1` then `gpu_session.sh plan 2` (docs/gpu.md, "The next GPU session"):
# each part at most PART_LIMIT seconds (default 360 and 300: 11 minutes, the rest of the 15
# for the machine's start) of its own steps, each step under its own
# cap (CAP_<step> overrides) and started only with NEED seconds left, a step whose
# PLAN_DIR/<step>.json exists skipped (a rerun on the
# same machine resumes), the results bundled after every step into OUT/plan-<part>.tar.gz
# with OUT/plan-<part>.txt (the summary); PLAN_SKIP="a b" skips steps (those the other
# part finished: newton, threads and read run in part 1 when time is left).  --emulated (or
# PLAN_SMALL=1): tiny sizes, the emulated runtime, any machine.  MC_PYTHON: an interpreter
# with liblinear-multicore (default: the one `setup` installs from .whl/ into MC_DIR,
# default /tmp/mc).
PLAN_1="setup env while scale-gpu newton threads read"
PLAN_2="setup scale-peers newton threads read newton-1e9"
# `all` (and `rehearse`): one call of at most ALL_LIMIT (default 570) seconds, the most
# valuable figures first: gpusvm.LinearSVC() at 10^8 and 10^9 nonzeros against
# liblinear-multicore -s 2 on every core (lsvc), Newton on the device (newton), the scaling
# study (scale: SDCASVC, PegasosSVC, -s 1, and the 10^9 LinearSVC cell if lsvc left it), the
# CPU backend on every core (cpu16), then what time is left: the WHILE comparison, the C
# search, threads and reading.  while-probe decides, under its cap, whether the later steps
# use CUDA graph WHILE nodes: PLAN_DIR/while.env holds GPUSVM_GRAPH_WHILE=0 unless the probe
# and the runtime's own self-test passed in time, and every later step reads it.
PLAN_ALL="setup env while-probe lsvc newton scale cpu16 while newton-cv threads read"
declare -A CAP=([setup]=60 [env]=45 [while]=90 [scale-gpu]=280 [scale-peers]=200
                [newton]=130 [threads]=100 [read]=60 [newton-1e9]=150
                [while-probe]=60 [lsvc]=260 [scale]=160 [cpu16]=100 [newton-cv]=100)
#: the seconds a step must have left to start (default half its cap): the steps whose one
#: record is written at their end start only with time for their estimate; Newton's rows
#: are written one by one (a step stopped at its cap keeps those done)
declare -A NEED=([newton]=60 [threads]=80 [read]=45 [newton-1e9]=120 [lsvc]=60 [scale]=40
                 [cpu16]=40 [newton-cv]=60)

plan_record() {   # step status seconds line: PLAN_DIR/<step>.json
    "$PY" -c 'import json, sys; s, st, sec, line, out = sys.argv[1:]
open(f"{out}/{s}.json", "w").write(json.dumps({"step": s, "status": st, "seconds": float(sec),
                                               "line": line}, indent=1))' "$@" "$PLAN_DIR"
}

plan_step() {     # the commands of one step (their output goes to PLAN_DIR/<step>.log)
    local step=$1 mc=${MC_PYTHON:-$MC_DIR/python}
    local scale=("$PY" benchmarks/bench_scale.py --out "$PLAN_DIR/scale" --threads "$(nproc)"
                 --peer-python "$mc" --losses squared_hinge)
    local cap=${STEP_CAP:-600}
    [ "$step" != while-probe ] && [ -f "$PLAN_DIR/while.env" ] && { set -a; . "$PLAN_DIR/while.env"; set +a; }
    case "$step" in
    while-probe)    # under a cap, and off (GPUSVM_GRAPH_WHILE=0) unless it passes in time
        echo "GPUSVM_GRAPH_WHILE=0" > "$PLAN_DIR/while.env"
        local test="import sys; from gpusvm.backends.device import runtime as r; why = r.while_self_test()
sys.exit(why and 'the runtime self-test: ' + why)"
        if [ -n "$SMALL" ]; then    # the emulator models the node: its setting alone
            test="from gpusvm.backends.device import runtime as r; assert r._graph_while_setting(True)"
        else
            timeout --kill-after=2 $((cap / 2)) "$PY" benchmarks/graph_while_probe.py --out "$PLAN_DIR" ||
                { echo "WHILE nodes off: the probe failed or took over $((cap / 2)) s"; return 0; }
        fi
        local rest=$((cap - SECONDS - 3)) rc why    # SECONDS: since this step's start
        [ "$rest" -lt 1 ] && rest=1
        why=$(GPUSVM_WHILE_SELFTEST_SECONDS=10 timeout --kill-after=2 "$rest" "$PY" -c "$test" 2>&1)
        rc=$?
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            echo "WHILE nodes off: the runtime's self-test (with the imports) took over $rest s"; return 0
        elif [ $rc -ne 0 ]; then
            echo "WHILE nodes off: $(echo "$why" | grep -v '^\s*$' | tail -n 1 | cut -c1-200)"; return 0
        fi
        echo "GPUSVM_GRAPH_WHILE=1" > "$PLAN_DIR/while.env"
        echo "WHILE nodes on: the probe and the runtime's self-test passed" ;;
    lsvc)           # LinearSVC's defaults, the squared hinge: gpusvm on the GPU against -s 2
        if [ -n "$SMALL" ]; then
            "${scale[@]}" --device emulated --nnz 2e4 8e4 --budget 60 --deadline $((cap - 20)) \
                --systems gpusvm-LinearSVC liblinear-mc-s2
        else    # the 10^9 cells start only if their 10^8 time grown 10x fits: -s 2 does not
            "${scale[@]}" --device cuda --nnz 1e8 1e9 --budget 150 --deadline $((cap - 40)) \
                --omp-wait-policy active --systems gpusvm-LinearSVC-gpu liblinear-mc-s2
        fi && "${scale[@]}" --table > "$PLAN_DIR/scale_table.txt" ;;
    scale)          # the study: SDCA, Pegasos, -s 1 (and lsvc's 10^9 cell if it was left)
        if [ -n "$SMALL" ]; then
            "${scale[@]}" --device emulated --nnz 2e4 8e4 --budget 60 --deadline $((cap - 20)) \
                --systems gpusvm-LinearSVC gpusvm-SDCASVC liblinear-mc-s1
        else
            "${scale[@]}" --device cuda --nnz 1e8 1e9 --budget 110 --deadline $((cap - 40)) \
                --omp-wait-policy active --systems gpusvm-LinearSVC-gpu gpusvm-SDCASVC-gpu \
                gpusvm-PegasosSVC-gpu liblinear-mc-s1
        fi && "${scale[@]}" --table > "$PLAN_DIR/scale_table.txt" ;;
    cpu16)          # the CPU backend on every core, on the 10^8 set
        if [ -n "$SMALL" ]; then
            "${scale[@]}" --device cpu --nnz 2e4 --budget 60 --deadline $((cap - 20)) \
                --systems gpusvm-LinearSVC-cpu
        else
            "${scale[@]}" --device cuda --nnz 1e8 --budget 90 --deadline $((cap - 30)) \
                --omp-wait-policy active --systems gpusvm-LinearSVC-cpu
        fi && "${scale[@]}" --table > "$PLAN_DIR/scale_table.txt" ;;
    newton-cv)
        if [ -n "$SMALL" ]; then
            "$PY" benchmarks/bench_newton_device.py --backend emulated --n 20000 --d 200 \
                --row-nnz 20 --cpu-backend none --cv --Cs 0.1,1 --no-sklearn --repeats 1 \
                --mc-python "" --json "$PLAN_DIR/newton_cv_small.json"
        else
            "$PY" benchmarks/bench_newton_device.py --backend cupy --n 1000000 --d 1000 \
                --row-nnz 100 --cpu-backend none --cv --no-sklearn --repeats 1 \
                --mc-python "" --machine "H200, $(nproc) cores" \
                --json "$PLAN_DIR/newton_cv_1e8.json"
        fi ;;
    setup)
        if ls .whl/*.whl 2>/dev/null | grep -qv liblinear_multicore; then
            "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target /tmp/site $(ls .whl/*.whl | grep -v liblinear_multicore) || return 1
        fi
        if [ -n "${MC_PYTHON:-}" ]; then echo "liblinear-multicore: $MC_PYTHON (given)"
        else    # its own folder: liblinear-official has the same import name; a libgomp
            # staged beside it, in case the machine has none
            mkdir -p "$MC_DIR/lib"
            cp .whl/libgomp.so.1 "$MC_DIR/lib/" 2>/dev/null
            printf '#!/bin/sh\nPYTHONPATH=%s LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}%s exec %s "$@"\n' \
                "$MC_DIR" "$MC_DIR/lib" "$(command -v "$PY")" > "$MC_DIR/python"
            chmod +x "$MC_DIR/python"
            { "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                  --target "$MC_DIR" .whl/liblinear_multicore-*-cp3*.whl &&
              "$mc" -c "import liblinear.liblinearutil"; } ||
            { echo "the wheel did not install or load: building the sdist";
              "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
                  --upgrade --target "$MC_DIR" .whl/liblinear_multicore-*.tar.gz; } || return 1
        fi
        "$mc" -c "import liblinear.liblinearutil as u, liblinear; print('liblinear-multicore', liblinear.__file__)"
        ;;
    env) "$PY" benchmarks/gpu_session.py --out "$PLAN_DIR" ${PLAN_EMU:+--emulated} "$step" ;;
    while)
        if [ "${GPUSVM_GRAPH_WHILE:-}" = 0 ] && [ -f "$PLAN_DIR/while-probe.json" ]; then
            plan_record while pass 0 "not run: while-probe turned WHILE nodes off"; return 0
        fi
        "$PY" benchmarks/gpu_session.py --out "$PLAN_DIR" ${PLAN_EMU:+--emulated} "$step" ;;
    scale-gpu)
        if [ -n "$SMALL" ]; then
            "${scale[@]}" --device emulated --nnz 2e4 4e4 --budget 60 --deadline 60 \
                --systems gpusvm-LinearSVC gpusvm-SDCASVC
        else    # a cell starts only by 160 s, and only if 10x its 1e8 time is <= 110 s
            "${scale[@]}" --device cuda --nnz 1e8 1e9 --budget 110 --deadline 160 \
                --systems gpusvm-LinearSVC-gpu gpusvm-SDCASVC-gpu gpusvm-PegasosSVC-gpu
        fi && "${scale[@]}" --table > "$PLAN_DIR/scale_table.txt" ;;
    scale-peers)
        if [ -n "$SMALL" ]; then
            "${scale[@]}" --device emulated --nnz 2e4 --budget 60 --deadline 60 \
                --systems liblinear-mc-s2 liblinear-mc-s1
        else    # s1 starts only by 110 s; the CPU backend (16 threads after issue 51) last;
            # OpenMP's threads spin at barriers, as on any unshared machine
            "${scale[@]}" --device cuda --nnz 1e8 --budget 150 --deadline 110 --omp-wait-policy active \
                --systems liblinear-mc-s2 liblinear-mc-s1 gpusvm-LinearSVC-cpu
        fi && "${scale[@]}" --table > "$PLAN_DIR/scale_table.txt" ;;
    newton)         # the device, liblinear-multicore -s 2, the CPU backend; C search: newton-cv
        if [ -n "$SMALL" ]; then
            "$PY" benchmarks/bench_newton_device.py --backend emulated --n 20000 --d 200 \
                --row-nnz 20 --threads "$(nproc)" --no-sklearn --repeats 1 \
                --mc-python "$mc" --json "$PLAN_DIR/newton_device_small.json"
        else
            "$PY" benchmarks/bench_newton_device.py --backend cupy --n 1000000 --d 1000 \
                --row-nnz 100 --threads "$(nproc)" --no-sklearn --repeats 1 \
                --mc-python "$mc" --machine "H200, $(nproc) cores" \
                --json "$PLAN_DIR/newton_device_1e8.json"
        fi ;;
    newton-1e9)
        if [ -n "$SMALL" ]; then
            "$PY" benchmarks/bench_newton_device.py --backend emulated --n 40000 --d 200 \
                --row-nnz 20 --cpu-backend none --no-sklearn --repeats 1 --mc-python "" \
                --json "$PLAN_DIR/newton_device_small_1e9.json"
        else    # the device alone: liblinear's conversion of 10^9 nonzeros takes minutes
            "$PY" benchmarks/bench_newton_device.py --backend cupy --n 10000000 --d 1000 \
                --row-nnz 100 --cpu-backend none --no-sklearn --repeats 1 --mc-python "" \
                --machine "H200, $(nproc) cores" --json "$PLAN_DIR/newton_device_1e9.json"
        fi ;;
    threads)
        if [ ! -f benchmarks/bench_threads.py ]; then
            echo "benchmarks/bench_threads.py is not in this tree: nothing to measure"; return 0
        fi
        if [ -n "$SMALL" ]; then
            "$PY" benchmarks/bench_threads.py --nnz 2e5 --threads 1 2 --peers mc \
                --mc-python "$mc" --json "$PLAN_DIR/threads.json"
        else
            "$PY" benchmarks/bench_threads.py --nnz 5e6 --threads 1 "$(nproc)" --peers mc \
                --mc-python "$mc" --json "$PLAN_DIR/threads.json"
            # SDCA's row blocks past their cap of 2: epochs and time on 4, 8, all cores
            "$PY" benchmarks/bench_threads.py --nnz 5e6 --threads 1 2 4 8 "$(nproc)" \
                --solvers sdca --peers --sdca-max-threads "$(nproc)" \
                --json "$PLAN_DIR/threads_sdca_uncapped.json"
        fi ;;
    read)
        if [ -n "$SMALL" ]; then
            "$PY" benchmarks/bench_read.py --gb 0.01 --rounds 1 --threads 1 2 --no-sklearn \
                --dir /tmp --json "$PLAN_DIR/read.json"
        else
            "$PY" benchmarks/bench_read.py --gb 0.5 --rounds 2 --threads 1 "$(nproc)" \
                --no-sklearn --dir /tmp --json "$PLAN_DIR/read.json"
        fi ;;
    *) echo "unknown plan step $step"; return 2 ;;
    esac
}

plan_main() {
    local part=${1:-} steps
    case "$part" in 1) steps=$PLAN_1 ;; 2) steps=$PLAN_2 ;; all) steps=$PLAN_ALL ;;
    *) echo "usage: gpu_session.sh plan 1|2 [--emulated] (or: all, rehearse)"; return 2 ;; esac
    shift
    PLAN_EMU=; SMALL=${PLAN_SMALL:-}
    for arg in "$@"; do case "$arg" in --emulated) PLAN_EMU=1; SMALL=1 ;; esac; done
    PLAN_DIR=${PLAN_DIR:-${TMPDIR:-/tmp}/gpusvm-plan${SMALL:+-small}}
    export PLAN_DIR PLAN_EMU SMALL PYTHON=$PY MC_DIR=${MC_DIR:-/tmp/mc}
    if [ -z "${GPUSVM_DATA:-}" ]; then
        if [ -d .gpudata ]; then export GPUSVM_DATA=$PWD/.gpudata; else export GPUSVM_DATA=$PWD/../shared/data; fi
    fi
    local limit=${PART_LIMIT:-$(case "$part" in 1) echo 360 ;; 2) echo 300 ;; *) echo "${ALL_LIMIT:-570}" ;; esac)}
    local start=$SECONDS missing=0
    local bundle="$OUT/plan-$part"
    mkdir -p "$PLAN_DIR" "$OUT"
    export PYTHONPATH="$PWD:$PWD/emulator:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    export PLAN_STEPS=$steps
    echo "plan $part: $steps (at most $limit s; results in $PLAN_DIR, bundled to $bundle.tar.gz)"
    for step in $steps; do
        local cap=${CAP[$step]} var="CAP_${step//-/_}" left t0 rc=0 line
        cap=${!var:-$cap}
        left=$((limit - (SECONDS - start)))
        if [ -f "$PLAN_DIR/$step.json" ] && [ "$step" != setup ]; then
            echo "[$step] done before: skipped"; continue
        fi
        if [[ " ${PLAN_SKIP:-} " == *" $step "* ]]; then
            echo "[$step] skipped: PLAN_SKIP"; continue
        fi
        if [ "$left" -lt "${NEED[$step]:-$((cap / 2))}" ]; then
            echo "[$step] not started: $left s left of $limit, it needs ${NEED[$step]:-$((cap / 2))} s"
            missing=$((missing + 1))
            continue
        fi
        [ "$cap" -gt "$left" ] && cap=$left
        echo "[$step] running (at most $cap s; $((SECONDS - start)) s into the part)"
        t0=$SECONDS
        rm -f "$PLAN_DIR/$step.stopped.json"
        STEP_CAP=$cap timeout --kill-after=5 "$cap" bash "$SELF" __plan_step "$step" \
            > "$PLAN_DIR/$step.log" 2>&1
        rc=$?
        line=$(grep -v '^\s*$' "$PLAN_DIR/$step.log" | tail -n 1 | cut -c1-300)
        if grep -q '^\[[0-9.e+]*\] ' "$PLAN_DIR/$step.log"; then    # bench_scale: its cells
            line=$(grep '^\[[0-9.e+]*\] ' "$PLAN_DIR/$step.log" | grep -v ' x .* nonzeros, generated' |
                   sed 's/^\[\([^]]*\)\] /\1 /' | paste -sd ';' | cut -c1-600)
        fi
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            line="stopped at its cap of $cap s; last: $line"; rc=124
        fi
        if [ "$step" = env ] || [ "$step" = while ]; then
            [ -f "$PLAN_DIR/$step.json" ] || plan_record "$step" fail $((SECONDS - t0)) "$line"
        elif [ $rc -eq 0 ] || [ "$step" = setup ]; then
            plan_record "$step" "$([ $rc -eq 0 ] && echo pass || echo fail)" $((SECONDS - t0)) "$line"
        elif [ $rc -eq 124 ]; then   # its cells and rows so far are kept: a rerun goes on
            local keep=$PLAN_DIR
            PLAN_DIR=$PLAN_DIR/.stopped; mkdir -p "$PLAN_DIR"
            plan_record "$step" stopped $((SECONDS - t0)) "$line"
            mv "$PLAN_DIR/$step.json" "$keep/$step.stopped.json"; PLAN_DIR=$keep
        fi
        [ -f "$PLAN_DIR/$step.json" ] && grep -q '"status": "pass"' "$PLAN_DIR/$step.json" ||
            missing=$((missing + 1))
        echo "[$step] rc $rc in $((SECONDS - t0)) s: $line"
        plan_bundle "$part" "$start"
    done
    plan_bundle "$part" "$start"
    cat "$bundle.txt"
    # plan 1 and 2 leave steps to each other; all and rehearse pass when every step passed
    [ "$part" != all ] || [ "$missing" -eq 0 ]
}

plan_bundle() {   # part start: OUT/plan-<part>.tar.gz (no data sets) and OUT/plan-<part>.txt
    local bundle="$OUT/plan-$1"
    {
        echo "plan $1, $((SECONDS - $2)) s, $(date -u +%FT%TZ), $(nproc) cores"
        "$PY" - "$PLAN_DIR" <<'PYEOF'
import json, os, sys
from pathlib import Path
order = os.environ.get("PLAN_STEPS", "").split()      # the plan's order, then the others
recs = []
for f in sorted(Path(sys.argv[1]).glob("*.json")):
    try:
        r = json.loads(f.read_text())
    except ValueError:
        continue
    if "step" in r:
        recs.append(r)
for r in sorted(recs, key=lambda r: order.index(r["step"]) if r["step"] in order else len(order)):
        print(f"  {r['step']:<12} {str(r.get('status', '-')).upper():<5} {str(r.get('line', ''))[:400]}")
PYEOF
        [ -f "$PLAN_DIR/scale_table.txt" ] && cat "$PLAN_DIR/scale_table.txt"
    } > "$bundle.txt"
    tar czf "$bundle.tar.gz" -C "$PLAN_DIR" --exclude='set-*' --exclude='*.npy' \
        --exclude='*_cache' . 2>/dev/null
}

if [ "${1:-}" = "stage" ]; then
    for f in $FILES; do
        mkdir -p ".gpudata/$(dirname "$f")"
        cp "../shared/data/$f" ".gpudata/$f"
    done
    # the peers the GPU machine lacks (it has numpy, scipy, scikit-learn, numba, CuPy):
    # liblinear-multicore, which PyPI has as a source distribution only: the sdist (built
    # there if no wheel installs) and, where a Python 3.12 is here, a cp312 wheel built from it
    mkdir -p .whl
    pip_dl=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
            --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
            --platform manylinux1_x86_64 -d .whl)
    for w in $STAGE_WHEELS; do "$PY" -m pip download -q "${pip_dl[@]}" "$w" || exit 1; done
    [ -f ".whl/liblinear_multicore-$MC_VERSION.tar.gz" ] || "$PY" -m pip download -q --no-deps \
        --no-binary=:all: -d .whl "liblinear-multicore==$MC_VERSION" || exit 1
    py312=${PYTHON312:-$(ls /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -n 1)}
    py312=${py312:-$(python3.12 -c "import sys; print(sys.executable)" 2>/dev/null)}
    if [ -n "$py312" ] && ! ls .whl/liblinear_multicore-*-cp312-*.whl >/dev/null 2>&1; then
        "$py312" -m pip wheel -q --no-deps -w .whl \
            ".whl/liblinear_multicore-$MC_VERSION.tar.gz" || echo "no cp312 wheel: the sdist is built there"
    fi
    gomp=$(ldconfig -p 2>/dev/null | grep -m 1 -o '/[^ ]*/libgomp\.so\.1$')
    [ -n "$gomp" ] && cp -L "$gomp" .whl/libgomp.so.1
    du -sh .gpudata .whl
    echo "then one device call: command='bash benchmarks/gpu_session.sh all'," \
         "carry=['.gpudata', '.whl'], timeout_s=600 (the generated sets are made there)"
    exit 0
fi

if [ "${1:-}" = "plan" ]; then
    shift
    plan_main "$@"
    exit $?
fi
if [ "${1:-}" = "all" ]; then
    shift
    plan_main all "$@"
    exit $?
fi
if [ "${1:-}" = "rehearse" ]; then   # the plan of `all` at small sizes on the emulator, here
    export PLAN_DIR=${PLAN_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/gpusvm-rehearse.XXXXXX")}
    OUT=${OUT_REHEARSE:-$OUT/rehearse}
    if [ -z "${MC_PYTHON:-}" ] && ! ls .whl/liblinear_multicore-* >/dev/null 2>&1 &&
            "$PY" -c "import liblinear.liblinearutil" 2>/dev/null; then
        export MC_PYTHON=$(command -v "$PY")    # no staged wheel: this interpreter's liblinear
    fi
    plan_main all --emulated
    exit $?
fi
if [ "${1:-}" = "__plan_step" ]; then   # one step of the plan, under plan_main's timeout
    plan_step "$2"
    exit $?
fi

EMU=()
STEPS=()
for arg in "$@"; do
    case "$arg" in
    --emulated) EMU=(--emulated) ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
