#!/usr/bin/env bash
# Fetch the EGL/GL/Vulkan loader .debs (amd64) into .gl/ for the device machine, as
# /work/.library/device/README.md prescribes (the device image has the NVIDIA driver but not
# the glvnd loaders that MuJoCo's EGL backend dlopens). Run here, on the dev machine, from any
# directory; idempotent (skips the download when all seven debs are present).
# bench/device/setup.sh unpacks them on the device (dpkg -x into /, then ldconfig).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
grep -qxF '/.gl/' .git/info/exclude 2>/dev/null || echo /.gl/ >>.git/info/exclude
PKGS=(libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
mkdir -p .gl
have=0
for p in "${PKGS[@]}"; do ls .gl/"${p}"_*_amd64.deb >/dev/null 2>&1 && have=$((have + 1)); done
if [ "$have" -eq "${#PKGS[@]}" ]; then
    echo "make_gl: .gl/ already holds ${PKGS[*]}"
else
    LISTS="${TMPDIR:-/tmp}/amd64-apt-lists"
    mkdir -p "$LISTS/partial"
    o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$LISTS")
    apt-get "${o[@]}" update -qq
    (cd .gl && apt-get "${o[@]}" download "${PKGS[@]}")
fi
ls -l .gl/*.deb
du -ch .gl/*.deb | tail -1
