#!/usr/bin/env bash
# Installs what tierflow needs to build and test on Debian 12, from Debian's
# packages only. The CUDA toolkit is not a Debian package here: where one is
# installed at /usr/local/cuda the build uses it, where none is the build says
# so and goes on without the CUDA backend.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (it calls apt-get)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends \
  build-essential binutils cmake ninja-build pkg-config ccache git \
  liburing-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev libtbb-dev libeigen3-dev libcli11-dev nlohmann-json3-dev \
  libopenmpi-dev openmpi-bin \
  libgtest-dev libgmock-dev libbenchmark-dev \
  clang libclang-rt-14-dev clang-format clang-tidy python3 >/dev/null
echo "install-deps.sh: dependencies installed"
