#!/usr/bin/env bash
# Configures and builds one build tree: scripts/build.sh BUILD_DIR [extra cmake args...]
# Compiles through ccache when it is installed (scripts/setup.sh installs it): paths are taken
# relative to the repository, so the build trees of one clone and a fresh clone elsewhere share
# their objects. HAL_NO_CCACHE=1 turns it off. HAL_BUILD_TARGET="<target>..." builds those
# targets only (scripts/test.sh: a tree that runs some tiers builds their hal_tier_<tier>).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$1"
shift
launcher=()
# shellcheck source=scripts/ccache_env.sh
source "$root/scripts/ccache_env.sh"
if hal_ccache_env "$root"; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build" -G Ninja -DHAL_WERROR=ON "${launcher[@]}" "$@" >/dev/null
cmake --build "$build" --parallel "$(nproc)" ${HAL_BUILD_TARGET:+--target $HAL_BUILD_TARGET}
