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
	if ! $go test -run '^$' -fuzz "^${t}\$" -fuzztime "$fuzztime" -parallel 1 "$pkg" >"$log" 2>&1; then
		cat "$log"
		failed=1
	fi
done < <(git grep --full-name -e '^func Fuzz' -- '*_test.go')
exit $failed
