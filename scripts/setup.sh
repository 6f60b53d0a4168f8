#!/usr/bin/env bash
# Installs the Debian packages pipeplan needs that are missing, and checks that LibTorch's BLAS
# is OpenBLAS. Idempotent: when everything is present it only checks (a few seconds).
set -euo pipefail

packages=(
  build-essential cmake ccache
  libtorch-dev libgloo-dev libopenblas0-openmp
  nlohmann-json3-dev libcli11-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist python3-torch python3-torchvision
)

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "setup: need root (or sudo) to run: $*" >&2; exit 1
  fi
}

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# LibTorch links the generic libblas.so.3; Debian's alternatives decide which BLAS that is.
# Check the library LibTorch itself resolves, not what we hope it resolves.
arch_lib=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
torch_blas() {
  ldd "$arch_lib/libtorch_cpu.so" | awk '/libblas\.so/ {print $3}' | xargs -r readlink -f
}
blas=$(torch_blas)
if [[ "$blas" != *openblas* ]]; then
  echo "setup: LibTorch's BLAS is '${blas:-none}'; switching the alternatives to OpenBLAS"
  as_root update-alternatives --set "libblas.so.3-$(basename "$arch_lib")" "$arch_lib/openblas-openmp/libblas.so.3"
  as_root update-alternatives --set "liblapack.so.3-$(basename "$arch_lib")" "$arch_lib/openblas-openmp/liblapack.so.3" || true
  blas=$(torch_blas)
fi
if [[ "$blas" != *openblas* ]]; then
  echo "setup: LibTorch still resolves libblas.so.3 to '$blas', not OpenBLAS" >&2
  exit 1
fi
echo "setup: ok (LibTorch BLAS: $blas)"
