#!/usr/bin/env bash
# End-to-end check of docker-compose.yml: builds the image, starts the stack, checks answers through the openai
# SDK (MISS then HIT-EXACT, streamed and not), /ready, Prometheus' targets and rules and the engines' C kernels,
# restarts the stack (`down`, `up`) and checks the cache survived, then tears it down with its volumes.
#
#   deploy/smoke.sh             base images from a registry (python:3.11-slim, redis, prom/prometheus)
#   deploy/smoke.sh --offline   no registry: stand-ins built from Debian packages (deploy/offline/base-images.sh),
#                               pip's local wheel folders (find-links) served to the build over loopback and
#                               this host's extra CAs (a TLS-inspecting proxy's) trusted by it
#
# Needs docker with the compose plugin, curl, and a python3 with the `openai` package ($PYTHON). Runs as its own
# compose project (llm-gateway-smoke): a stack of yours keeps its volumes, but ports 8080 and 9090 must be free.
# SMOKE_NO_CACHE=1 builds every layer again (a cold build's time); SMOKE_KEEP=1 leaves the stack running;
# MAX_IMAGE_BYTES (1.5 GB) fails a bigger image.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PYTHON=${PYTHON:-python3}
PROJECT=llm-gateway-smoke
IMAGE=llm-gateway:local
MAX_IMAGE_BYTES=${MAX_IMAGE_BYTES:-1500000000}
SERVICES=(gateway engine-1 engine-2 redis prometheus)  # Grafana's image cannot be had offline: not checked
OFFLINE=0
[[ "${1:-}" == "--offline" ]] && OFFLINE=1
STATE=$(mktemp -d /tmp/llm-gateway-smoke.XXXXXX)
SERVER_PID=

compose() { docker compose -p "$PROJECT" "$@"; }
say() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
cleanup() {
    local rc=$?
    if [[ $rc -ne 0 ]]; then
        say "FAILED (exit $rc); last log lines:"
        compose logs --tail 12 gateway prometheus redis 2>&1 || true
        compose logs engine-1 engine-2 2>&1 | grep -v aiohttp.access | tail -12 || true
    fi
    if [[ -z "${SMOKE_KEEP:-}" ]]; then compose down -v --remove-orphans >/dev/null 2>&1 || true; fi
    [[ -n "$SERVER_PID" ]] && kill "$SERVER_PID" 2>/dev/null
    rm -rf "$STATE"
    exit $rc
}
trap cleanup EXIT

"$PYTHON" -c "import openai" 2>/dev/null || { echo "needs $PYTHON with the openai package" >&2; exit 1; }
BUILD_ARGS=()
if [[ $OFFLINE == 1 ]]; then
    say "base images from Debian packages (deploy/offline/base-images.sh)"
    while IFS='=' read -r name value; do export "$name=$value"; done \
        < <(deploy/offline/base-images.sh | grep -E '^[A-Z_]+=')
    BUILD_ARGS+=(--build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg TORCH_INDEX=)
    # pip's find-links folders (the CPU torch wheel) are served over loopback: the build runs on the host's network
    links=${PIP_FIND_LINKS:-$(pip config get global.find-links 2>/dev/null || true)}
    if [[ -n "$links" && -d "$links" ]]; then
        # a fixed port (SMOKE_WHEELS_PORT): the URL is a build argument, and a new one would rebuild every layer
        port=${SMOKE_WHEELS_PORT:-38765}
        "$PYTHON" -m http.server --bind 127.0.0.1 --directory "$links" "$port" >/dev/null 2>&1 &
        SERVER_PID=$!
        sleep 1
        kill -0 "$SERVER_PID" 2>/dev/null || { echo "port $port is taken: set SMOKE_WHEELS_PORT" >&2; exit 1; }
        BUILD_ARGS+=(--build-arg "PIP_FIND_LINKS=http://127.0.0.1:$port/")
    fi
    index=${PIP_INDEX_URL:-$(pip config get global.index-url 2>/dev/null || true)}
    [[ "$index" == http* ]] && BUILD_ARGS+=(--build-arg "PIP_INDEX_URL=$index")
    shopt -s nullglob
    cas=(/usr/local/share/ca-certificates/*.crt)
    shopt -u nullglob
    [[ ${#cas[@]} -gt 0 ]] && BUILD_ARGS+=(--build-arg "CA_CERTS=$(cat "${cas[@]}")")
fi
# docker's CLI builds with BuildKit only through buildx: without it, the classic builder (same Dockerfile)
docker buildx version >/dev/null 2>&1 || export DOCKER_BUILDKIT=0

say "building $IMAGE"
start=$(date +%s)
[[ -n "${SMOKE_NO_CACHE:-}" ]] && BUILD_ARGS+=(--no-cache)  # a cold build, for its time
nice -n 19 docker build --network host "${BUILD_ARGS[@]}" -t "$IMAGE" . > "$STATE/build.log" 2>&1 \
    || { tail -40 "$STATE/build.log"; exit 1; }
build_s=$(( $(date +%s) - start ))
size=$(docker image inspect -f '{{.Size}}' "$IMAGE")
say "built in ${build_s}s; image $(( size / 1000000 )) MB"
sed 's/\x1b\[[0-9;]*m//g' "$STATE/build.log" | grep -E '^(C kernels:|kept .*onnx|xgrammar on CPU)' | sed 's/^/    /' \
    || echo "    (layers from the build cache; SMOKE_NO_CACHE=1 builds them all again)"
[[ $size -le $MAX_IMAGE_BYTES ]] || { say "image over $MAX_IMAGE_BYTES bytes"; exit 1; }

gateway_start_s() {  # seconds from the gateway container's start (after the engines were healthy) to now
    local started
    started=$(docker inspect -f '{{.State.StartedAt}}' "$(compose ps -q gateway)")
    echo $(( $(date +%s) - $(date -d "$started" +%s) ))
}

wait_ready() {  # seconds from now until the gateway's /ready answers 200
    local t0 deadline
    t0=$(date +%s); deadline=$(( t0 + 300 ))
    until curl -sf -o /dev/null http://127.0.0.1:8080/ready; do
        [[ $(date +%s) -lt $deadline ]] || { say "gateway not ready after 300 s"; return 1; }
        sleep 1
    done
    echo $(( $(date +%s) - t0 ))
}

compose down -v --remove-orphans >/dev/null 2>&1 || true
say "starting ${SERVICES[*]}"
start=$(date +%s)
compose up -d --no-build "${SERVICES[@]}" > "$STATE/up.log" 2>&1 || { cat "$STATE/up.log"; exit 1; }
wait_ready >/dev/null
ready_s=$(( $(date +%s) - start ))
gateway_s=$(gateway_start_s)
say "ready ${ready_s}s after \`up\` (the gateway ${gateway_s}s after its container started)"
compose logs engine-1 engine-2 2>&1 | grep -E 'engine kernels' | sed 's/^/    /'
if compose logs engine-1 engine-2 2>&1 | grep -q 'engine kernels: torch'; then
    say "an engine runs without its C kernels"; exit 1
fi
"$PYTHON" deploy/smoke_check.py first "$STATE/answers.json"
compose exec -T redis redis-cli info persistence | grep -E '^aof_enabled:1' >/dev/null \
    || { say "Redis runs without its append-only file"; exit 1; }

say "restarting: down (volumes kept), up"
compose down > "$STATE/down.log" 2>&1
start=$(date +%s)
compose up -d --no-build "${SERVICES[@]}" > "$STATE/up.log" 2>&1 || { cat "$STATE/up.log"; exit 1; }
wait_ready >/dev/null
restart_s=$(( $(date +%s) - start ))
say "ready ${restart_s}s after the second \`up\` (the gateway $(gateway_start_s)s after its container started)"
"$PYTHON" deploy/smoke_check.py again "$STATE/answers.json"

say "PASS: build ${build_s}s, image $(( size / 1000000 )) MB, ready ${ready_s}s after up (gateway ${gateway_s}s; ${restart_s}s after the restart), cache survived the restart"
