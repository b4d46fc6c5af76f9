#!/usr/bin/env bash
# Installs what the container tests (label `container`) need, from Debian 12
# packages: podman (builds and runs the image without a daemon or registry),
# runc (crun refuses some sandboxes' cgroup layout), debootstrap (makes the
# debian:12-slim base image locally when no registry is reachable) and
# podman-compose (runs deploy/docker-compose.yml), netavark + aardvark-dns +
# iptables (compose networks resolve service names, e.g. Prometheus scraping
# `vismoe:9464`; bookworm's CNI has no DNS plugin). Kept apart from
# deploy/install-deps.sh: nothing else needs them and the image must not get them.
# Idempotent. Needs root (or sudo).
set -euo pipefail

PKGS=(podman runc debootstrap podman-compose netavark aardvark-dns iptables)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  echo "install-container-deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install-container-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-container-deps: done"
