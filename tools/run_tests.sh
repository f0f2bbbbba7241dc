#!/usr/bin/env bash
# Runs ruff, then the test suite once per Keras backend. Slow tests are marked
# `only_backend(...)`, so each runs on one backend. Each pass runs on
# KERAS_GEN_TEST_WORKERS processes (default 2, one per core of the CI
# machine; pytest-xdist, a module's tests kept together). Extra arguments
# go to pytest.
set -u
cd "$(dirname "$0")/.."
failed=()
# Lint and format first: seconds (config in pyproject.toml).
echo "=== ruff"
{ python -m ruff check . && python -m ruff format --check .; } || failed+=("ruff")
for backend in jax tensorflow torch; do
    echo "=== KERAS_BACKEND=$backend"
    KERAS_BACKEND=$backend python -m pytest -q -p no:cacheprovider \
        -n "${KERAS_GEN_TEST_WORKERS:-2}" --dist loadfile "$@" || failed+=("$backend")
done
if [ ${#failed[@]} -ne 0 ]; then
    echo "FAILED on: ${failed[*]}"
    exit 1
fi
echo "All backends passed."
