#!/usr/bin/env bash
# Same-session A/B of the hot path (issue 28's check): tools/bench_zero_copy.py --quick under this
# tree's cupygraph and under an older one, alternating in separate processes on the same card, each
# competitor timed alone in rotated blocks (tools/bench_method.py). The figures that matter are each
# row's ratio to its bare floor within a run (one kernel: "bare graph.launch()"; chain and stencil:
# "bare graph, no copies"; PIECEWISE: the bare pieces): comparing those across versions in one session
# removes the host's drift. Rows: one-kernel host time with one, two and four input addresses; chain
# and stencil latency, GPU time and host time; the PIECEWISE host time; issue 30's target rows (eight
# input buffers in turn and at random, copy and view mode, a constant, two outputs, a 4 MiB output;
# tools/bench_targets.py). The floors are tools/bench_targets.FLOORS.
#
# Prepare here (the device copy has no git history):
#   rm -rf .ab_old && mkdir .ab_old && git archive 357e924 cupygraph setup.py | tar -x -C .ab_old
#   echo /.ab_old/ >> .git/info/exclude
# then on the GPU machine (carry [".whl", ".ab_old"]), after `bash tools/gpu_session.sh` (which installs
# the wheels into /tmp/site and builds this tree's extension; with .ab_old present it runs this script
# itself):  bash tools/ab_hot_path.sh [rounds]
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
# The older tree's compiled replay, built in place there (this tree's is built by gpu_session.sh).
(cd .ab_old && python3 setup.py -q build_ext --inplace > "$OUT/ab_old_build.log" 2>&1) || echo "old build failed"
for round in $(seq 1 "${1:-3}"); do
  for version in old new; do
    root=$PWD
    [ "$version" = old ] && root=$PWD/.ab_old && rm -rf "$root/tools" && cp -r tools "$root/tools"
    PYTHONPATH=$root:/tmp/site timeout 240 python3 "$root/tools/bench_zero_copy.py" --quick \
      --out "$OUT/ab_${version}_${round}.json" > "$OUT/ab_${version}_${round}.log" 2>&1 \
      || echo "round $round $version failed (see its log)"
  done
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
from tools.bench_targets import FLOORS
rows = {}
for path in sorted(glob.glob(f"{sys.argv[1]}/ab_*.json")):
    version = path.rsplit("/", 1)[1].split("_")[1]
    for result in json.load(open(path))["results"]:
        for kind in ("host_us", "latency_us", "gpu_us"):
            figures = result.get(kind, {})
            floor = next((figures[f] for f in FLOORS if f in figures), None)
            for label, value in figures.items():
                key = (result["workload"], kind, label)
                rows.setdefault(key, {}).setdefault(version, []).append((value, value - floor if floor else None,
                                                                          value / floor if floor else None))
print(f"{'workload':44} {'metric':10} {'row':56} {'old us':>8} {'new us':>8} {'old-floor':>9} {'new-floor':>9}")
for (workload, kind, label), by in sorted(rows.items()):
    def med(version, i):
        values = [v[i] for v in by.get(version, []) if v[i] is not None]
        return statistics.median(values) if values else float("nan")
    print(f"{workload[:44]:44} {kind[:-3]:10} {label[:56]:56} {med('old', 0):8.2f} {med('new', 0):8.2f} "
          f"{med('old', 1):9.2f} {med('new', 1):9.2f}")
PY
