# syntax=docker/dockerfile:1
# Multi-stage build of the ext-authz service into a small, static, non-root image:
#   docker build -t llm-ratelimit/ext-authz .
# The mockprovider target builds the e2e tools (mock provider and Go load client) for the compose
# stack's offline mode:  docker build --target mockprovider -t llm-ratelimit/mockprovider .

ARG GO_VERSION=1.26

# Modules: `go mod download` reaches the module proxy the golang image names (GOPROXY, by default
# proxy.golang.org). CI's machines reach no image registry and its containers no outside host:
# there e2e/compose/standins.sh builds a stand-in golang:1.26 whose GOPROXY is a file:// copy of
# the modules go.sum names, so this file builds unchanged and offline; a user's build is not
# affected.

FROM golang:${GO_VERSION} AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd ./cmd
COPY internal ./internal
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags='-s -w' -o /out/ext-authz ./cmd/ext-authz

FROM build AS build-tools
COPY e2e/mockprovider ./e2e/mockprovider
COPY e2e/goclient ./e2e/goclient
COPY e2e/prompts.json /out/prompts.json
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    go build -ldflags='-s -w' -o /out/mockprovider ./e2e/mockprovider && \
    go build -ldflags='-s -w' -o /out/goclient ./e2e/goclient && \
    mkdir -p /out/state /out/trust

# The e2e tools: not for production.
FROM gcr.io/distroless/static-debian12:nonroot AS mockprovider
COPY --from=build-tools /out/mockprovider /out/goclient /out/prompts.json /
# Owned by nonroot so that named volumes mounted there are writable.
COPY --from=build-tools --chown=nonroot:nonroot /out/state /var/lib/mockprovider
COPY --from=build-tools --chown=nonroot:nonroot /out/trust /trust
USER nonroot:nonroot
EXPOSE 8080 443
ENTRYPOINT ["/mockprovider"]

# The service (last stage: the default target). Distroless static: no shell, no package manager,
# uid 65532; the binary is static (CGO_ENABLED=0) and reads its limits from -config.
FROM gcr.io/distroless/static-debian12:nonroot AS ext-authz
COPY --from=build /out/ext-authz /ext-authz
USER nonroot:nonroot
ENV GRPC_ADDR=:9001 ADMIN_ADDR=:9090
EXPOSE 9001 9090
ENTRYPOINT ["/ext-authz"]
CMD ["serve"]
