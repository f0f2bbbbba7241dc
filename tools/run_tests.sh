#!/usr/bin/env bash
# Runs the test suite once per Keras backend. Slow tests are marked
# `only_backend(...)`, so each runs on one backend. Extra arguments go to pytest.
set -u
cd "$(dirname "$0")/.."
failed=()
for backend in jax tensorflow torch; do
    echo "=== KERAS_BACKEND=$backend"
    KERAS_BACKEND=$backend python -m pytest -q -p no:cacheprovider "$@" || failed+=("$backend")
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "FAILED on: ${failed[*]}"
    exit 1
fi
echo "All backends passed."
