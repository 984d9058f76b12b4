#!/usr/bin/env bash
# Builds stand-ins for the three images docker-compose.yml pulls (python:3.11-slim, redis, prom/prometheus) from
# Debian packages alone, on a host that reaches a Debian mirror and PyPI but no image registry:
# debootstrap a minimal bookworm, `docker import` it, then one small Dockerfile per image beside this script.
# Run as root (debootstrap). Images that already exist are kept; FORCE=1 rebuilds them.
#   deploy/offline/base-images.sh    then use the variables it prints (deploy/smoke.sh sets them itself)
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PREFIX=${OFFLINE_PREFIX:-llm-gateway-offline}
DEBIAN_IMAGE=$PREFIX/debian:bookworm
# The mirror this host's apt uses (deb822 `URIs:` or a one-line `deb URL`), else Debian's own
mirror() {
    local uri
    uri=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null \
          | grep -v security | head -n1 | sed -E 's/^URIs:[[:space:]]*//; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?//' \
          | awk '{print $1}')
    echo "${DEBIAN_MIRROR:-${uri:-http://deb.debian.org/debian}}"
}

# As Docker's official Debian images are set up: no apt caches, docs, man pages or translations, now or after
# later `apt-get install`s (they were most of a minimal image's size)
slim() {
    local root=$1
    cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
APT
    cat > "$root/etc/dpkg/dpkg.cfg.d/docker-slim" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/info/*
DPKG
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin "$root"/var/lib/apt/lists/* \
        "$root"/usr/share/man/* "$root"/usr/share/locale/* "$root"/usr/share/info/*
    find "$root/usr/share/doc" -type f ! -name copyright -delete
}

have() { [[ -z "${FORCE:-}" ]] && docker image inspect "$1" >/dev/null 2>&1; }

if ! have "$DEBIAN_IMAGE"; then
    command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
    rootfs=$(mktemp -d /tmp/llm-gateway-rootfs.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    nice -n 19 debootstrap --variant=minbase bookworm "$rootfs" "$(mirror)"
    slim "$rootfs"
    tar -C "$rootfs" -c . | docker import - "$DEBIAN_IMAGE"
fi
for name in python redis prometheus; do
    case $name in
        python) tag=$PREFIX/python:3.11-slim ;;
        redis) tag=$PREFIX/redis:7 ;;
        prometheus) tag=$PREFIX/prometheus:2 ;;
    esac
    if ! have "$tag"; then
        nice -n 19 docker build --network host --build-arg "DEBIAN_IMAGE=$DEBIAN_IMAGE" -t "$tag" \
            -f "$HERE/$name.Dockerfile" "$HERE"
    fi
done
cat <<VARS
BASE_IMAGE=$PREFIX/python:3.11-slim
REDIS_IMAGE=$PREFIX/redis:7
PROMETHEUS_IMAGE=$PREFIX/prometheus:2
VARS
