# The steps python_wheel.sh and torch_wheel.sh share, sourced by both (they set root, build,
# work, python and a name for their messages):
#   install_hal_prefix            HAL of BUILD_DIR installed into $work/prefix
#   build_wheel SOURCE EXPECTED CONFIG...
#                                 `pip wheel SOURCE` with CONFIG into $work/dist, through ccache
#                                 like every build here, failing unless its log says EXPECTED
# The scratch build directory ($work/build) is kept between runs: a rebuild of unchanged sources
# costs a configure and a link check.

install_hal_prefix() {
  cmake --install "$build" --prefix "$work/prefix" > "$work/install.log" 2>&1 ||
    { tail -30 "$work/install.log"; echo "$name: cmake --install failed"; exit 1; }
}

build_wheel() {
  local source="$1" expected="$2"
  shift 2
  local config=(-Cbuild-dir="$work/build" "$@")
  # shellcheck source=scripts/ccache_env.sh
  source "$root/scripts/ccache_env.sh"
  if hal_ccache_env "$root"; then
    # The pip runs have a HOME of their own; ccache keeps the caller's cache.
    CCACHE_DIR="${CCACHE_DIR:-$(ccache -k cache_dir)}"
    export CCACHE_DIR
    config+=(-Ccmake.define.CMAKE_C_COMPILER_LAUNCHER=ccache
      -Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
  fi
  # pip runs `rustc --version` for its user agent, and rustup's rustc writes
  # ~/.rustup/settings.toml: every pip run here gets the script's own HOME, so the caller's
  # (under CTest, the tests' HOME, which must stay empty) is not written. Its cache stays the
  # caller's.
  export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$("$python" -m pip cache dir 2> /dev/null || echo "$work/pip-cache")}"
  if ! HOME="$work/home" "$python" -m pip wheel -v --no-deps --no-build-isolation \
      --disable-pip-version-check -w "$work/dist" "${config[@]}" "$source" \
      > "$work/build.log" 2>&1; then
    tail -60 "$work/build.log"
    echo "$name: pip wheel failed (the whole log: $work/build.log)"
    exit 1
  fi
  if ! grep -qF "$expected" "$work/build.log"; then
    echo "$name: the build log does not say: $expected"
    exit 1
  fi
}
