# shellcheck shell=bash
# Sourced by scripts/build.sh and tests/install/wheel_build.sh: the one ccache setting of every
# compile this project runs. `hal_ccache_env ROOT` exports it and succeeds when ccache is there
# and HAL_NO_CCACHE is unset.
# - paths relative to ROOT (the repository): the build trees of one clone and of a fresh clone
#   elsewhere share their objects;
# - the sloppiness a precompiled header needs (the torch extension's): without it ccache refuses
#   every file that includes one. The caller's configuration file is not enough, since the
#   packaging tests run pip with a HOME of their own, where ccache looks for that file.
hal_ccache_env() {
  [[ -z "${HAL_NO_CCACHE:-}" ]] && command -v ccache > /dev/null || return 1
  export CCACHE_BASEDIR="$1" CCACHE_NOHASHDIR=true
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
}
