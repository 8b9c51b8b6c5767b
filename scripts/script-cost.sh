#!/usr/bin/env bash
# Counts the instructions redis-server executes per decision of bucket.lua, as a function (FCALL)
# and as a script (EVALSHA): runs of 6 takes of 2 token buckets (BenchmarkScriptRuns), under a key
# each (keys=2) and sharing one (keys=1, Spec.Slot), against a
# redis-server running under valgrind's callgrind. Unlike times, the counts repeat exactly on a
# shared, noisy machine, so two versions of bucket.lua can be compared by a few hundred runs.
#
#   scripts/script-cost.sh [runs]        # default 300 runs (1,800 decisions) per form
#
# Needs valgrind (callgrind_control) and redis-server; not part of make test.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-300}
for bin in valgrind callgrind_control redis-server redis-cli; do
	command -v "$bin" >/dev/null || { echo "script-cost: $bin not found (apt-get install valgrind redis-server redis-tools)" >&2; exit 1; }
done

dir=$(mktemp -d)
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/callgrind.out" \
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>"$dir/valgrind.log" &
pid=$!
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done

go test -c -o "$dir/bucket.test" ./internal/bucket/ >/dev/null
bench() { # form/layout runs
	SCRIPT_COST_ADDR=127.0.0.1:$port "$dir/bucket.test" -test.run '^$' -test.bench "^BenchmarkScriptRuns/$1\$" -test.benchtime "$2x" >/dev/null
}
total() { # instructions counted so far
	callgrind_control -d "$pid" >/dev/null 2>&1
	grep -h '^totals:' "$dir"/callgrind.out* | awk '{s += $2} END {print s + 0}'
}
for form in function/keys=2 function/keys=1 script/keys=2 script/keys=1; do
	bench "$form" 20 # loads the library and the script, creates the keys
	before=$(total)
	callgrind_control -i on "$pid" >/dev/null 2>&1
	bench "$form" "$runs"
	callgrind_control -i off "$pid" >/dev/null 2>&1
	after=$(total)
	# The benchmark runs once with b.N = 1, then with b.N = runs: 6 decisions a run.
	echo "$form: $(( (after - before) / ((runs + 1) * 6) )) instructions per decision ($(( runs + 1 )) runs of 6)"
done
