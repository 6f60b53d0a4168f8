# Sourced by the scripts: build folder, parallelism and ccache settings shared by all of them.
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
CCACHE_ARGS=()
if command -v ccache >/dev/null 2>&1; then
  CCACHE_ARGS=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # The precompiled LibTorch header is only reused by ccache with these.
  # Paths under the checkout are hashed relative to it, so clones and worktrees share the cache.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}
fi
