#!/usr/bin/env bash
# The end-to-end suite (make e2e; part of make test): builds ext-authz, the mock provider and the
# Go load client, then runs e2e/test_e2e.py with the project virtualenv's pytest against the real
# Envoy, redis-server and the official SDKs. Reports land in e2e/report/.
#
# pytest runs in a process group of its own; whatever happens (failure, Ctrl-C, timeout), every
# process of that group (the servers and clients the suite started) is killed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
if [ ! -x "$venv/bin/pytest" ] || [ ! -x "$venv/bin/envoy" ]; then
	echo "e2e: the virtualenv is missing or incomplete: run make deps (scripts/deps.sh)" >&2
	exit 1
fi
if [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$(sha256sum e2e/requirements.txt | cut -d' ' -f1)" ]; then
	echo "e2e: the virtualenv predates e2e/requirements.txt: run make deps (scripts/deps.sh)" >&2
	exit 1
fi
command -v redis-server >/dev/null || { echo "e2e: redis-server is missing: run make deps" >&2; exit 1; }

bin=${E2E_BIN:-bin/e2e}
mkdir -p "$bin"
echo "e2e: building ext-authz, mockprovider, goclient into $bin"
go build -o "$bin/ext-authz" ./cmd/ext-authz
go build -o "$bin/mockprovider" ./e2e/mockprovider
go build -o "$bin/goclient" ./e2e/goclient
export E2E_BIN=$PWD/$bin

pgid=""
cleanup() {
	if [ -n "$pgid" ]; then
		kill -TERM -- "-$pgid" 2>/dev/null || true
		sleep 1
		kill -KILL -- "-$pgid" 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The whole folder, unless the arguments name test files or folders of it (./e2e/run.sh e2e/test_x.py).
targets=(e2e)
for a in "$@"; do
	case $a in e2e/*) targets=() ;; esac
done
# setsid: pytest leads a new process group (its pid), which cleanup kills as a whole.
setsid "$venv/bin/python" -m pytest "${targets[@]}" -p no:cacheprovider -ra --durations=10 --timeout=900 "$@" &
pgid=$!
wait "$pgid"
