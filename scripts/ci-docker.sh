#!/usr/bin/env bash
# Make a Docker engine and trainwiz's local base image available, for CI and for the docker-marked
# tests. No container registry is reachable on the CI machines, so the base image is built from a
# Debian rootfs (debootstrap) and `docker import`ed instead of pulled. Idempotent: every step is
# skipped when its result already exists (daemon answering, image present, rootfs tarball cached).
#
# Env: TRAINWIZ_BASE_IMAGE (default trainwiz-base:bookworm), TRAINWIZ_ROOTFS_CACHE
# (default /var/cache/trainwiz), TRAINWIZ_DEBIAN_MIRROR (default: read from /etc/apt/sources*).
set -euo pipefail

IMAGE="${TRAINWIZ_BASE_IMAGE:-trainwiz-base:bookworm}"
CACHE="${TRAINWIZ_ROOTFS_CACHE:-/var/cache/trainwiz}"
SUITE=bookworm
PACKAGES=python3,python3-venv,python3-pip,ca-certificates,git
TARBALL="$CACHE/rootfs-$SUITE-minbase.tar"
SOCK=/var/run/docker.sock

log() { printf 'ci-docker: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

# The first Debian mirror serving the suite itself (not -security / -updates) in the apt sources.
debian_mirror() {
    if [ -n "${TRAINWIZ_DEBIAN_MIRROR:-}" ]; then
        echo "$TRAINWIZ_DEBIAN_MIRROR"
        return
    fi
    local f uri
    for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list; do
        [ -r "$f" ] || continue
        case "$f" in
        *.sources)
            # deb822: a stanza whose Suites list the bare suite; take its first URI.
            uri=$(awk -v suite="$SUITE" '
                BEGIN { RS=""; FS="\n" }
                {
                    uris=""; ok=0
                    for (i = 1; i <= NF; i++) {
                        if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i); split($i, u, /[ \t]+/); uris=u[1] }
                        if ($i ~ /^Suites:/) { n=split($i, s, /[ \t]+/); for (j = 2; j <= n; j++) if (s[j] == suite) ok=1 }
                    }
                    if (ok && uris != "") { print uris; exit }
                }' "$f")
            ;;
        *)
            uri=$(awk -v suite="$SUITE" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($(i+1) == suite) { print $i; exit } } }' "$f")
            ;;
        esac
        if [ -n "$uri" ]; then
            echo "$uri"
            return
        fi
    done
    echo "http://deb.debian.org/debian"
}

# 1. Docker engine installed.
if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io"
    apt_install docker.io
fi

# 2. A daemon answering (start one in the background when none does).
if ! docker info >/dev/null 2>&1; then
    log "starting dockerd (log: /var/log/trainwiz-dockerd.log)"
    as_root sh -c 'nohup dockerd >/var/log/trainwiz-dockerd.log 2>&1 &'
    for _ in $(seq 1 120); do
        if [ -S "$SOCK" ] && docker info >/dev/null 2>&1; then
            break
        fi
        sleep 0.5
    done
    if ! docker info >/dev/null 2>&1; then
        log "dockerd did not answer within 60 s; its log:"
        tail -n 30 /var/log/trainwiz-dockerd.log >&2 || true
        exit 1
    fi
fi
log "docker daemon $(docker version --format '{{.Server.Version}}') answering"

# 3. The base image, imported from a cached debootstrap rootfs.
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE present"
    exit 0
fi
if [ ! -s "$TARBALL" ]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        apt_install debootstrap
    fi
    MIRROR=$(debian_mirror)
    ROOTFS=$(mktemp -d /tmp/trainwiz-rootfs.XXXXXX)
    trap 'as_root rm -rf "$ROOTFS"' EXIT
    log "debootstrap $SUITE from $MIRROR (about a minute)"
    as_root debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >/tmp/trainwiz-debootstrap.log 2>&1 || {
        tail -n 30 /tmp/trainwiz-debootstrap.log >&2
        exit 1
    }
    as_root rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
    as_root mkdir -p "$CACHE"
    as_root sh -c "tar -C '$ROOTFS' -c . > '$TARBALL.part' && mv '$TARBALL.part' '$TARBALL'"
fi
log "docker import $TARBALL as $IMAGE"
docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --message "trainwiz base: debootstrap $SUITE minbase + $PACKAGES" \
    "$TARBALL" "$IMAGE" >/dev/null
log "$IMAGE imported"
