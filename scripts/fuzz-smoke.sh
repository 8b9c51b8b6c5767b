#!/usr/bin/env bash
# Runs every fuzz target of the module for a short time each (FUZZTIME, 2s by default), past the
# seed corpora that `go test` alone replays: every request and response parser is fuzzed on each
# `make test`. A failing input is written under its package's testdata/fuzz/ and fails the run.
# `make fuzz` is the long run of FuzzCheck.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-2s}
go=${GO:-go}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
# Targets by package, found in the sources (listing them with go test would build every package).
while IFS=: read -r file line; do
	pkg=./$(dirname "$file")
	t=${line#func }
	t=${t%%(*}
	echo "fuzz: $pkg $t ($fuzztime)"
	for try in 1 2; do
		if $go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" -parallel 1 "$pkg" >"$log" 2>&1; then
			break
		fi
		# The fuzzing engine itself can end a short run with "context deadline exceeded" while a
		# worker is still busy, with no failing input: that run is tried once more. A failing input
		# is always written and reported, and fails the suite.
		if [ "$try" = 1 ] && grep -q 'context deadline exceeded' "$log" && ! grep -q 'Failing input written' "$log"; then
			echo "fuzz: $t: the engine's deadline, no failing input: once more"
			continue
		fi
		cat "$log"
		failed=1
		break
	done
done < <(git grep --full-name -e '^func Fuzz' -- '*_test.go')
exit $failed
