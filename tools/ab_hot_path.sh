#!/usr/bin/env bash
# Same-session A/B of the jit hot path (issue 12's check): the chain and stencil workloads timed
# under this tree's cupygraph and under an older one, alternating in separate processes on the same
# card, each competitor timed alone in rotated blocks (tools/bench_method.py). The ratio that
# matters is "cupygraph jit ÷ bare CuPy graph" within each run; comparing it across versions in
# one session removes the host's session-to-session drift.
#
# Prepare here (the device copy has no git history):
#   rm -rf .ab_old && mkdir .ab_old && git archive 1b5ec47 cupygraph | tar -x -C .ab_old
#   echo /.ab_old/ >> .git/info/exclude
# then on the GPU machine (carry [".whl", ".ab_old"]):  bash tools/ab_hot_path.sh [rounds]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONUNBUFFERED=1
skip=bare-copy,jit-fused,torch-graph-same,torch,torch-graph,torch-compile,jax
for round in $(seq 1 "${1:-3}"); do
  for version in old new; do
    root=$PWD; skipped=$skip
    # The older tree knows no pdl field: its jit rows are plain graphs, compared with this tree's jit-plain.
    [ "$version" = old ] && root=$PWD/.ab_old && skipped=$skip,jit-plain
    # bench.py puts its own tree first on sys.path: the older tree gets a copy of this tree's tools.
    [ "$version" = old ] && rm -rf "$root/tools" && cp -r tools "$root/tools"
    PYTHONPATH=$root:/tmp/site timeout 200 python3 "$root/tools/bench.py" --quick --workloads chain,stencil \
      --skip "$skipped" --out "$OUT/ab_${version}_${round}.json" > "$OUT/ab_${version}_${round}.log" 2>&1 \
      || echo "round $round $version failed (see its log)"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, sys
rows = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/ab_*.json")):
    version = path.rsplit("/", 1)[1].split("_")[1]
    for r in json.load(open(path))["results"]:
        if r["competitor"] in ("bare CuPy graph", "cupygraph jit (copy)", "cupygraph jit (view)",
                               "cupygraph jit (view), pdl off"):
            rows.setdefault((version, r["workload"], r["size"]), {}).setdefault(r["competitor"], []).append(r["latency_us"])
for (version, workload, size), by in sorted(rows.items()):
    bare = sorted(by["bare CuPy graph"])[len(by["bare CuPy graph"]) // 2]
    ratios = {c: sorted(v)[len(v) // 2] / bare for c, v in by.items() if c != "bare CuPy graph"}
    print(version, workload, size, " ".join(f"{c}: {x:.3f}x" for c, x in ratios.items()))
PY
