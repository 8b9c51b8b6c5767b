#!/usr/bin/env bash
# Counts the instructions and the mispredicted branches of the tokenizer per 1 KB text of common
# English words (BenchmarkCount/<encoding>/common-words-1KB), under valgrind's callgrind with its
# branch simulation, collected inside Encoding.count only. Unlike times, the counts repeat on a
# shared, noisy machine, so two versions of the tokenizer can be compared by a few thousand texts.
#
#   scripts/count-cost.sh [texts]        # default 4000 texts per encoding
#
# Needs valgrind (callgrind_annotate); not part of make test.
set -euo pipefail
cd "$(dirname "$0")/.."
texts=${1:-4000}
for bin in valgrind callgrind_annotate; do
	command -v "$bin" >/dev/null || { echo "count-cost: $bin not found (apt-get install valgrind)" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/tiktoken.test" ./internal/tiktoken/ >/dev/null
printf '%-12s %14s %14s\n' encoding instructions mispredicted
for enc in o200k_base cl100k_base; do
	# Go's asynchronous preemption signals upset callgrind; the benchmark needs none.
	(cd internal/tiktoken && GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --branch-sim=yes \
		--toggle-collect='*Encoding).count' --callgrind-out-file="$dir/$enc.out" \
		"$dir/tiktoken.test" -test.run '^$' -test.bench "^BenchmarkCount/$enc/common-words-1KB\$" \
		-test.benchtime "${texts}x" >/dev/null 2>"$dir/$enc.log") ||
		{ cat "$dir/$enc.log" >&2; exit 1; }
	# Totals: Ir Bc Bcm Bi Bim. b.Loop calls Count texts times (and once more to start).
	callgrind_annotate "$dir/$enc.out" | awk -v enc="$enc" -v n="$texts" '/PROGRAM TOTALS/ {
		gsub(",", ""); printf "%-12s %14.0f %14.1f\n", enc, $1 / n, ($5 + $9) / n }'
done
