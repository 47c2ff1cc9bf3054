#!/usr/bin/env bash
# Build llama.cpp once for both CPU engines: `llama-server` (the batching engine) and the shared
# libraries (libllama, libggml*, libmtmd) that llama-cpp-python's in-process engine loads with
# ctypes. The source is the llama.cpp that llama-cpp-python's sdist vendors, with the patches in
# scripts/llama-server-patches/ applied, so the server and the bindings are the same llama.cpp.
#
#   scripts/build_llama_cpp.sh PYTHON LLAMA_CPP_PYTHON_VERSION OUT_BINARY
#
# 1. llama-cpp-python's Python package is installed from that sdist without its native build
#    (CMAKE_ARGS=-DLLAMA_BUILD=OFF: its CMakeLists.txt then builds nothing), and with pip's cache
#    off, so that no cached wheel (pip keys them on the version, not on CMAKE_ARGS) is taken and
#    this library-less one is not cached for anyone else.
# 2. One CMake build (shared libraries, portable CPU flags from $LLAMA_CMAKE_ARGS) of the
#    llama-server target, which builds llama, ggml and mtmd on the way; the server's own targets,
#    its common library and mtmd as unity builds (scripts/llama-cpp-unity.cmake), as llama.cpp
#    already builds libllama's model files.
# 3. The libraries go into the installed llama_cpp/lib/, where llama_cpp.py loads them from with
#    no environment variable (LLAMA_CPP_LIB_PATH stays free to override), so tests, Ray workers and
#    the demos find them; llama-server goes to OUT_BINARY and finds the same files through its
#    RUNPATH ($ORIGIN/<relative path to llama_cpp/lib>).
#
# Env: LLAMA_CMAKE_ARGS (the Makefile's portable flags), JOBS (default 2), LLAMA_CPP_WORK (where
# the sdist is unpacked and built; default OUT_BINARY's folder/.llama-cpp-build, removed after a
# successful build unless KEEP_BUILD=1).
set -euo pipefail
PY=$1
VERSION=$2
OUT=$3
WORK=${LLAMA_CPP_WORK:-$(dirname "$OUT")/.llama-cpp-build}
SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
PKG="$WORK/llama_cpp_python-$VERSION"
SRC="$PKG/vendor/llama.cpp"
SCRIPTS="$(cd "$(dirname "$0")" && pwd)"
PATCHES="$SCRIPTS/llama-server-patches"
mkdir -p "$WORK"
[ -f "$SDIST" ] || "$PY" -m pip download -q --no-binary :all: --no-deps -d "$WORK" "llama-cpp-python==$VERSION"

# 1. The bindings, from the unpatched sdist (the patches touch llama.cpp's C++ only).
"$PY" -m pip uninstall -q -y llama-cpp-python 2>/dev/null || true
CMAKE_ARGS="-DLLAMA_BUILD=OFF" "$PY" -m pip install -q --no-cache-dir "$SDIST"
LIB=$("$PY" -c 'import importlib.util, os; print(os.path.join(importlib.util.find_spec("llama_cpp").submodule_search_locations[0], "lib"))')
OUT_DIR=$(cd "$(dirname "$OUT")" && pwd)
RPATH_REL=$("$PY" -c 'import os, sys; print(os.path.relpath(sys.argv[1], sys.argv[2]))' "$LIB" "$OUT_DIR")

# 2. llama.cpp, patched.
if [ ! -f "$SRC/CMakeLists.txt" ]; then
  tar xzf "$SDIST" -C "$WORK" "llama_cpp_python-$VERSION/vendor/llama.cpp"
  # Our patches to that llama.cpp (scripts/llama-server-patches/README.md says what each does and
  # why); one that does not apply stops the build: a new llama-cpp-python pin needs them rechecked.
  for p in "$PATCHES"/*.patch; do
    patch -s -p1 -d "$SRC" <"$p" || { echo "error: $p does not apply to llama.cpp $VERSION; see $PATCHES/README.md"; exit 1; }
  done
fi
# RUNPATH: $ORIGIN for the libraries (each finds the others beside it, as in llama-cpp-python's own
# wheel), $ORIGIN/RPATH_REL for llama-server.
# shellcheck disable=SC2086 # LLAMA_CMAKE_ARGS is a list of flags
cmake -S "$SRC" -B "$WORK/build" -G "$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')" \
  -DCMAKE_BUILD_TYPE=Release ${LLAMA_CMAKE_ARGS:-} -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_PROJECT_INCLUDE="$SCRIPTS/llama-cpp-unity.cmake" \
  -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN;\$ORIGIN/$RPATH_REL" \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >"$WORK/cmake.log"
cmake --build "$WORK/build" --target llama-server llama ggml mtmd -j "${JOBS:-2}" >"$WORK/build.log" \
  || { tail -30 "$WORK/build.log"; echo "error: llama.cpp build failed (log: $WORK/build.log)"; exit 1; }

# 3. Install: the libraries (with their soname links) into llama_cpp/lib, then the server.
rm -rf "$LIB"
mkdir -p "$LIB"
cp -P "$WORK"/build/bin/lib*.so* "$LIB"/
install -m 755 "$WORK/build/bin/llama-server" "$OUT"
"$OUT" --version 2>&1 | head -2
"$PY" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__, "loads", llama_cpp.llama_cpp._base_path)'
[ "${KEEP_BUILD:-0}" = 1 ] || rm -rf "$WORK"
