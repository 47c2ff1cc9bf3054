#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (the CPU engine's server) from the llama.cpp source that
# llama-cpp-python's sdist vendors, so the server and the Python bindings are the same llama.cpp.
# Only the llama-server target is built (static, portable CPU flags from $LLAMA_CMAKE_ARGS), with
# the patches in scripts/llama-server-patches/ applied.
#
#   scripts/build_llama_server.sh PYTHON LLAMA_CPP_PYTHON_VERSION OUT_BINARY
#
# Env: LLAMA_CMAKE_ARGS (the Makefile's portable flags), JOBS (default 2), LLAMA_SERVER_WORK
# (where the sdist is unpacked and built; default OUT_BINARY's folder/.llama-server-build, removed
# after a successful build unless KEEP_BUILD=1).
set -euo pipefail
PY=$1
VERSION=$2
OUT=$3
WORK=${LLAMA_SERVER_WORK:-$(dirname "$OUT")/.llama-server-build}
SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
PATCHES="$(cd "$(dirname "$0")" && pwd)/llama-server-patches"
mkdir -p "$WORK"
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  # pip's HTTP cache answers this without the network when llama-cpp-python was installed here.
  [ -f "$SDIST" ] || "$PY" -m pip download -q --no-binary :all: --no-deps -d "$WORK" "llama-cpp-python==$VERSION"
  tar xzf "$SDIST" -C "$WORK" "llama_cpp_python-$VERSION/vendor/llama.cpp"
  # Our patches to that llama.cpp (scripts/llama-server-patches/README.md says what each does and
  # why); one that does not apply stops the build: a new llama-cpp-python pin needs them rechecked.
  for p in "$PATCHES"/*.patch; do
    patch -s -p1 -d "$SRC" <"$p" || { echo "error: $p does not apply to llama.cpp $VERSION; see $PATCHES/README.md"; exit 1; }
  done
fi
# shellcheck disable=SC2086 # LLAMA_CMAKE_ARGS is a list of flags
cmake -S "$SRC" -B "$WORK/build" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
  -DCMAKE_BUILD_TYPE=Release ${LLAMA_CMAKE_ARGS:-} -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$WORK/cmake.log"
cmake --build "$WORK/build" --target llama-server -j "${JOBS:-2}" >"$WORK/build.log" \
  || { tail -30 "$WORK/build.log"; echo "error: llama-server build failed (log: $WORK/build.log)"; exit 1; }
install -m 755 "$WORK/build/bin/llama-server" "$OUT"
"$OUT" --version 2>&1 | head -2
[ "${KEEP_BUILD:-0}" = 1 ] || rm -rf "$WORK"
