#!/usr/bin/env bash
# Makes the local base image localhost/debian:12-slim with debootstrap from this
# machine's own Debian mirror, for hosts where no container registry is
# reachable. Kept (cached) once made; VISMOE_REBUILD_BASE=1 makes it again.
#   tests/container/make_base_image.sh [podman global flags...]
# Needs root (debootstrap), debootstrap and podman (deploy/install-container-deps.sh).
set -euo pipefail

IMAGE=localhost/debian:12-slim
podman=(podman "$@")

if [[ "${VISMOE_REBUILD_BASE:-0}" != 1 ]] && "${podman[@]}" image exists "$IMAGE"; then
  echo "base image $IMAGE: cached"
  exit 0
fi

# The host's apt sources (deb822 or one-line): the image then gets the same
# mirror, suites and security updates as the host.
mirror=""
if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
  mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)
elif [[ -r /etc/apt/sources.list ]]; then
  mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list)
fi
mirror="${mirror:-http://deb.debian.org/debian}"

rootfs=$(mktemp -d -t vismoe-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "base image $IMAGE: debootstrap bookworm from $mirror"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -n 30 "$rootfs.log"; rm -f "$rootfs.log"; exit 1
}
rm -f "$rootfs.log"
if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
  cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/"
  rm -f "$rootfs/etc/apt/sources.list"
fi
# As in Docker's debian:*-slim: no docs, man pages or translations from later
# installs, and no downloaded .deb files kept.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
find "$rootfs/usr/share/doc" -type f ! -name copyright -delete
tar -C "$rootfs" -c . | "${podman[@]}" import \
  --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  - "$IMAGE" >"$rootfs.log" 2>&1 || { cat "$rootfs.log"; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"
echo "base image $IMAGE: made ($("${podman[@]}" image inspect --format '{{.Size}}' "$IMAGE") bytes)"
