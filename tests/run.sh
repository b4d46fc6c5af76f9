#!/usr/bin/env bash
# The project's test command (README "Run the tests"): configure, build and run
# the whole CTest suite. Dependencies come from deploy/install-deps.sh.
#   tests/run.sh                      release preset, every label
#   VISMOE_PRESET=asan tests/run.sh   sanitizers, unit label (see CMakePresets.json)
#   tests/run.sh -L parity            extra arguments go to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${VISMOE_PRESET:-release}"
# shellcheck disable=SC2086  # VISMOE_CMAKE_ARGS is a list of -D options
cmake --preset "$preset" ${VISMOE_CMAKE_ARGS:-}
cmake --build --preset "$preset" -j "$(nproc)"
# The openai package for the HTTP API's e2e test (not needed by unit presets).
if [[ $preset == release ]]; then bash tests/setup_python.sh; fi
ctest --preset "$preset" -j "$(nproc)" "$@"
