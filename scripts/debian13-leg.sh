#!/usr/bin/env bash
# The second leg of scripts/test.sh: pipeplan built and tested against Debian 13's LibTorch 2.6
# inside a Debian 13 root made with debootstrap and kept in a cache folder outside the clone.
#
#   bash scripts/debian13-leg.sh [--prepare | --exec COMMAND... | CTEST ARGS...]
#
# --prepare only makes (or completes) the cached root; --exec runs COMMAND in it, with this
# checkout at /src (read-only), e.g. `--exec python3 -c 'import torch; print(torch.__version__)'`. Needs root (or sudo), network access to a
# Debian mirror the first time, and about 3.5 GB of disk in $PIPEPLAN_CACHE_DIR
# (default ~/.cache/pipeplan). The root is trusted only when each of its two phases (debootstrap,
# then the packages of scripts/setup.sh) wrote its completion mark; an interrupted phase is redone.
# /proc, /sys, /dev and the source are mounted in a private mount namespace, so they are released
# when this script ends, however it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
cache=${PIPEPLAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeplan}
root=$cache/debian13
mirror=${DEBIAN13_MIRROR:-http://deb.debian.org/debian}
base_mark=$root/.pipeplan-base-complete
packages_mark=$root/.pipeplan-packages-complete

mode=test
case "${1:-}" in
  --prepare) mode=prepare; shift ;;
  --exec) mode=exec; shift ;;
esac

if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "debian13-leg: needs root or sudo (debootstrap, chroot, mount)" >&2; exit 1; }
  exec sudo --preserve-env=PIPEPLAN_CACHE_DIR,DEBIAN13_MIRROR,JOBS bash "$0" "$@"
fi

say() { echo "debian13-leg: $*"; }
started=$SECONDS

# Runs COMMAND inside the root with /proc, /sys, /dev and (read-only) the source and the CUDA
# toolkit mounted, in a mount namespace of its own that disappears with it.
in_root() {
  local cuda_mount=""
  [ -d /usr/local/cuda/include ] && cuda_mount=/usr/local/cuda
  unshare --mount --propagation private env ROOT="$root" SRC="$src" CUDA_MOUNT="$cuda_mount" \
    bash -euo pipefail -c '
      mount -t proc proc "$ROOT/proc"
      mount -t sysfs -o ro sysfs "$ROOT/sys"
      mount --rbind /dev "$ROOT/dev"
      mkdir -p "$ROOT/src"
      mount --bind "$SRC" "$ROOT/src"
      mount -o remount,bind,ro "$ROOT/src"
      if [ -n "$CUDA_MOUNT" ]; then
        mkdir -p "$ROOT/usr/local/cuda"
        mount --bind "$CUDA_MOUNT" "$ROOT/usr/local/cuda"
        mount -o remount,bind,ro "$ROOT/usr/local/cuda"
      fi
      exec chroot "$ROOT" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"' in_root "$@"
}

if [ ! -f "$base_mark" ]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null \
      || { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null &&
           DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null; }
  fi
  say "making a Debian 13 root in $root (about 4 minutes)"
  rm -rf "$root"
  mkdir -p "$cache"
  # debootstrap mounts /proc in the target itself; its own namespace releases that on any exit.
  unshare --mount --propagation private \
    debootstrap --variant=minbase trixie "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 \
    || { tail -n 20 "$cache/debootstrap.log" >&2; say "debootstrap failed (log: $cache/debootstrap.log)"; exit 1; }
  touch "$base_mark"
  say "root made in $((SECONDS - started)) s"
fi

# The packages are those of scripts/setup.sh, installed by it inside the root; its list is the
# mark's content, so a changed list installs again.
wanted=$(sha256sum scripts/setup.sh | cut -d' ' -f1)
if [ "$(cat "$packages_mark" 2>/dev/null)" != "$wanted" ]; then
  say "installing the build dependencies in the root (about 3 minutes)"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  in_root bash -c 'dpkg --configure -a && bash /src/scripts/setup.sh' >"$cache/packages.log" 2>&1 \
    || { tail -n 20 "$cache/packages.log" >&2; say "installing packages failed (log: $cache/packages.log)"; exit 1; }
  echo "$wanted" >"$packages_mark"
  say "root ready in $((SECONDS - started)) s"
fi
[ "$mode" = prepare ] && exit 0
if [ "$mode" = exec ]; then in_root "$@"; exit; fi

# The build folder and ccache live in the root (outside the clone), at the same path for every
# clone, so a warm cache rebuilds little.
say "building and testing against $(in_root dpkg-query -W -f='LibTorch ${Version}' libtorch-dev)"
# The first leg ran the tests that never reach LibTorch and built the benchmarks: this leg
# builds and runs the rest (docs/building.md).
in_root env JOBS="${JOBS:-$(nproc)}" PIPEPLAN_LEG=here BUILD_DIR=/var/cache/pipeplan-build \
  PIPEPLAN_TESTS="${PIPEPLAN_TESTS:-torch-facing}" PIPEPLAN_BUILD_BENCH="${PIPEPLAN_BUILD_BENCH:-OFF}" \
  CCACHE_DIR=/var/cache/pipeplan-ccache bash /src/scripts/test.sh "$@"
say "passed in $((SECONDS - started)) s"
