#!/usr/bin/env bash
# The GPU checks in one call of a lent GPU machine (bare: CUDA, PyTorch, NumPy, PyArrow; no Dagster, MLflow,
# DuckDB or pydantic): the GPU tests, then `strata bench` on the GPU -- a synthetic graph whose feature file
# is several times the memory budget (out-of-core policies in a memory cgroup, the in-memory reference
# unconfined), every policy on `tiny` (a crash check), `demo` unconfined, and (part `policies`, not run by
# default) the policies issue's `demo` comparison on the GPU: diskgnn, ginex, naive in a cgroup of 25% of its
# feature bytes, against in-memory GPU training; `io`: benchmarks/io_backends.py on the machine's disk;
# `bf16`: demo with bf16 autocast (compare with a `demo` part of the same call). Every part has its own time
# limit and writes under $OUT, so a part that fails or runs out of time leaves the others' results.
#
#   benchmarks/gpu_check.sh [OUT_DIR]        # default: $OUT, else ./gpu_out
#
# Needs wheels for what the machine lacks in .whl/ (duckdb, pydantic, pydantic_core, annotated_types,
# typing_inspection; `pip download --python-version 3.12 ...`, see the device notes in BENCHMARKS.md).
# Sizes: GPU_CHECK_NODES (default 2000000 nodes of 128 float32 features, 1.02 GB; 10% labelled) and
# GPU_CHECK_BUDGET (default 320M: the feature file 3.2x the budget).
set -uo pipefail
OUT_DIR=${1:-${OUT:-gpu_out}}
mkdir -p "$OUT_DIR"
NODES=${GPU_CHECK_NODES:-2000000}
BUDGET=${GPU_CHECK_BUDGET:-320M}
START=$SECONDS
stamp() { echo "== $* (${SECONDS}s since start: $((SECONDS - START))s)"; }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
STRATA=(python3 -c "import sys; from pipelines.cli import app; sys.argv[0] = 'strata'; app()")

stamp setup
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv | tee "$OUT_DIR/gpu.txt"
python3 -c "import torch, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(), 'numpy', numpy.__version__)" \
  | tee -a "$OUT_DIR/gpu.txt"
nproc; free -g | head -2; df -h . | tail -1
(cat /proc/mounts | grep -E "cgroup" ; ls /sys/fs/cgroup | head -5) 2>&1 | head -8
python3 setup.py -q build_ext --inplace -j "$(nproc)" >"$OUT_DIR/build.log" 2>&1 || { tail -40 "$OUT_DIR/build.log"; exit 1; }
stamp built

REPORTS=/tmp/gpu_check_reports  # the bench's JSON and plot; only the JSON goes to $OUT (8 files come back)
mkdir -p "$REPORTS"
bench() {  # bench NAME TIMEOUT ARGS...: strata bench, its report copied to $OUT_DIR/NAME.json
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "${STRATA[@]}" bench "$@" --out "$REPORTS/$name.json" 2>&1 | grep -v "━" | tail -14
  cp "$REPORTS/$name.json" "$OUT_DIR/" 2>/dev/null
  stamp "$name"
}

for part in ${GPU_CHECK_PARTS:-tests ooc tiny demo}; do
  case $part in
    tests)  # the GPU tests (marked gpu; each skips without CUDA)
      timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" -ra tests/trainer tests/pipelines/test_batches.py \
        --ignore=tests/trainer/test_mlflow_model.py --ignore=tests/trainer/test_tracking.py 2>&1 \
        | tee "$OUT_DIR/gpu_tests.log" | tail -25
      stamp tests ;;
    ooc)  # out of core on the GPU: features several times the budget, GPU utilisation sampled beside it
      nvidia-smi dmon -s u -d 1 >"$OUT_DIR/dmon.txt" 2>&1 &
      DMON=$!
      DS="synthetic:nodes=${NODES},degree=10,dim=128,classes=16,seed=1,locality=0.9,window=64,labeled=0.1"
      bench gpu_ooc 300 --dataset "$DS" --root /tmp/strata_ooc --policies in_memory,diskgnn \
        --memory-budget "$BUDGET" --set train.epochs=3 --eval-batches 2 --repeats 3
      kill $DMON 2>/dev/null ;;
    tiny)  # every policy trains on the GPU (a crash check, not a timing)
      bench gpu_tiny 120 --dataset tiny --root /tmp/strata_tiny --policies all --set train.epochs=2 ;;
    demo)  # demo, unconfined, in-memory against diskgnn; GPU_CHECK_DEMO_SETS: ';'-separated variants of --set
      IFS=';' read -ra VARIANTS <<<"${GPU_CHECK_DEMO_SETS:-}"
      [ ${#VARIANTS[@]} -eq 0 ] && VARIANTS=("")
      for i in "${!VARIANTS[@]}"; do
        sets=()
        for kv in ${VARIANTS[$i]}; do sets+=(--set "$kv"); done
        echo "gpu_demo_$i: ${VARIANTS[$i]:-defaults}" | tee -a "$OUT_DIR/gpu.txt"
        bench "gpu_demo_$i" 150 --dataset demo --root /tmp/strata_demo --policies in_memory,diskgnn \
          --set train.epochs=4 --repeats 3 "${sets[@]}"
      done ;;
    policies)  # the policies issue's demo bench on the GPU (naive alone takes ~10 s an epoch)
      bench gpu_policies 280 --dataset demo --root /tmp/strata_demo --policies diskgnn,in_memory,ginex,naive \
        --memory-budget 25M --set train.epochs=3 --repeats 3 ;;
    io)  # io_uring against the pread pool on this machine's disk (the trainer issue's read-backend goals)
      timeout 200 python3 benchmarks/io_backends.py --path /tmp/strata_io_bench.bin --size-gib 2 \
        --random-reads 65536 --repeats 3 --json "$OUT_DIR/gpu_io_backends.json" 2>&1 | tail -20
      stamp io ;;
    bf16)  # bf16 autocast against float32 on the GPU, demo in memory and from the store (speed and accuracy)
      bench gpu_bf16 200 --dataset demo --root /tmp/strata_demo --policies in_memory,diskgnn \
        --set train.epochs=4 --set train.autocast=bf16 --repeats 3 ;;
    *) echo "unknown part $part (tests, ooc, tiny, demo, policies, io, bf16)" ;;
  esac
done

python3 - "$OUT_DIR" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
keys = ("epoch_s", "gpu_step_share", "gpu_step_s", "load_busy_s", "assemble_busy_s", "compute_busy_s", "wait_s", "read_s",
        "assemble_s", "graph_s", "overlap")
for path in sorted(out.glob("gpu_*.json")):
    name = path.name
    report = json.loads(path.read_text())
    if not isinstance(report, dict) or "policies" not in report:
        continue  # not a bench report (gpu_io_backends.json)
    print(f"{name}: budget {report.get('memory_budget')}, confinement {report.get('confinement')}")
    rows = report.get("policies", {})
    for policy, row in rows.items():
        t = row.get("steady_timers") or row.get("timers", {})  # the epochs epoch_s is taken over
        cells = [f"{k}={row.get(k, t.get(k))}" for k in keys]
        print(f"  {policy}: " + " ".join(cells) + f" bytes_read={row.get('bytes_read')} test_acc={row.get('test_acc')}"
              f" peak_cgroup_mb={row.get('peak_cgroup_mb')} runs={row.get('epoch_s_runs')}")
    if "in_memory" in rows and "diskgnn" in rows and rows["in_memory"].get("epoch_s"):
        print(f"  diskgnn / in_memory: {rows['diskgnn']['epoch_s'] / rows['in_memory']['epoch_s']:.3f}")
EOF
