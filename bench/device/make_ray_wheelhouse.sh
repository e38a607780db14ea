#!/usr/bin/env bash
# Fill .whl-ray/ with the cp312 manylinux x86_64 wheels that `wam eval --executor ray` needs on
# the device machine and that its image lacks (see /work/.library/device/KINDS.md, "Python
# packages already there"), small enough to travel with a device call (64 MiB in all, repo
# included). Run here (it needs PyPI); idempotent: raw downloads are cached in
# $WHEELHOUSE_CACHE/raw (shared with make_wheelhouse.sh) and the repack is byte-reproducible.
#
# Carried as they are on PyPI:
#   pyzmq 27.3.0 (wamcore itself);
#   jsonschema 4.26.0 + jsonschema-specifications 2025.9.1 + referencing 0.37.0 + rpds-py
#       2026.9.1 (ray's one Requires-Dist the device lacks; their attrs and typing-extensions
#       are on the device).
# Every other unconditional Requires-Dist of ray 2.60.0 is on the device: click, filelock,
# msgpack, packaging (>=24.2), protobuf (>=3.20.3; ray's *_pb2.py are builder-style, no
# runtime version check), pyyaml, requests. setup_ray.sh prints their versions and checks the
# minimums. ray[default] extras (aiohttp_cors, opencensus, opentelemetry, pydantic, ...) are
# NOT carried: without them Ray runs its dashboard head and agent in --minimal mode, which is
# all a local cluster of actors needs (the device's aiohttp/grpcio do not change that).
#
# ray 2.60.0 (79 MB, 202 MB unpacked) is repacked as a BENCHMARK-ONLY build, version
# 2.60.0+wamcore.bench (ray.__version__ still says 2.60.0), recompressed at zlib level 9,
# without (see bench/device/README.md, "Ray", for how each was checked):
#   ray/jars/                    Java workers (ray_dist.jar, 34.5 MB); services.py starts Java
#                                workers only if this folder exists AND `java` is on PATH
#   ray/dashboard/client/build/  the dashboard's web UI; with include_dashboard=False the
#                                dashboard head runs with --disable-frontend and never opens it
#   ray/rllib/ ray/data/ ray/serve/ ray/tune/ ray/train/ ray/air/ ray/llm/
#                                the libraries on top of Ray core; core, the dashboard head and
#                                agent, the runtime-env agent, the autoscaler monitor and the
#                                workers never import them (only dashboard HTTP handlers for
#                                those libraries do, lazily, when queried)
# Everything else (ray core, _raylet.so, gcs_server, raylet, _private, dashboard Python code,
# autoscaler, util, experimental, dag, scripts, vendored thirdparty files) is unchanged.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/device"
WHL="$ROOT/.whl-ray"
CACHE="${WHEELHOUSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/wamcore-wheelhouse}"
LOCAL=wamcore.bench
PY="${PYTHON:-python3}"

cd "$ROOT"
grep -qxF '/.whl-ray/' .git/info/exclude 2>/dev/null || echo /.whl-ray/ >>.git/info/exclude

PASS_THROUGH=(
    pyzmq==27.3.0
    jsonschema==4.26.0
    jsonschema-specifications==2025.9.1
    referencing==0.37.0
    rpds-py==2026.9.1
)
RAY=ray==2.60.0
RAY_DROP=(
    ray/jars/
    ray/dashboard/client/build/
    ray/rllib/
    ray/data/
    ray/serve/
    ray/tune/
    ray/train/
    ray/air/
    ray/llm/
)
# what a local cluster of actors runs (strace of ray.init + actors, bench/device/README.md):
# the repack must still hold each of these
RAY_MUST_KEEP=(
    ray/_raylet.so
    ray/core/src/ray/gcs/gcs_server
    ray/core/src/ray/raylet/raylet
    ray/core/libjemalloc.so
    ray/_private/workers/default_worker.py
    ray/_private/workers/setup_worker.py
    ray/_private/runtime_env/agent/main.py
    ray/_private/log_monitor.py
    ray/dashboard/dashboard.py
    ray/dashboard/agent.py
    ray/autoscaler/_private/monitor.py
    ray/_private/thirdparty/pynvml/pynvml.py
    ray/thirdparty_files/psutil/__init__.py
)

PIP_PLATFORM=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64
    --platform manylinux_2_5_x86_64)

mkdir -p "$CACHE/raw"
echo "== downloading into $CACHE/raw (cached)"
"$PY" -m pip download -q "${PIP_PLATFORM[@]}" -d "$CACHE/raw" "${PASS_THROUGH[@]}" "$RAY" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true

raw() {  # the one cached wheel of distribution $1 (name as on PyPI) at version $2
    local norm; norm="$(echo "$1" | tr 'A-Z-.' 'a-z__')"
    local f
    for f in "$CACHE/raw/"*.whl; do
        local base; base="$(basename "$f")"
        local n="${base%%-*}"; n="$(echo "$n" | tr 'A-Z-.' 'a-z__')"
        local rest="${base#*-}"; local v="${rest%%-*}"
        if [ "$n" = "$norm" ] && [ "$v" = "$2" ] && [[ "$base" != *-cp3[0-9]*-cp3[0-9]* || "$base" == *-cp312-* ]]; then
            echo "$f"; return 0
        fi
    done
    echo "make_ray_wheelhouse: no cached wheel for $1==$2 in $CACHE/raw" >&2; return 1
}

STAGE="$(mktemp -d "${TMPDIR:-/tmp}/wheelhouse-ray.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

echo "== pass-through wheels"
for spec in "${PASS_THROUGH[@]}"; do
    cp "$(raw "${spec%%==*}" "${spec##*==}")" "$STAGE/"
done

echo "== repacking ray (benchmark-only, +$LOCAL)"
drops=(); for p in "${RAY_DROP[@]}"; do drops+=(--drop "$p"); done
"$PY" "$HERE/repack_wheel.py" "$(raw ray "${RAY##*==}")" "$STAGE" --local "$LOCAL" "${drops[@]}" \
    --note "Java jars, dashboard web UI and the rllib/data/serve/tune/train/air/llm libraries removed; ray core unchanged"

# repack_wheel.py hands writestr a ZipInfo, which ignores the ZipFile's compresslevel (zlib's
# default 6 is used): rewrite the repack at level 9, same members, order, times and modes
echo "== recompressing at zlib level 9"
"$PY" - "$STAGE"/ray-*+"$LOCAL"-*.whl "${RAY_DROP[@]}" -- "${RAY_MUST_KEEP[@]}" <<'PYEOF'
import os, sys, zipfile
path, rest = sys.argv[1], sys.argv[2:]
sep = rest.index("--")
dropped, must_keep = rest[:sep], rest[sep + 1:]
before = os.path.getsize(path)
tmp = path + ".tmp"
with zipfile.ZipFile(path) as zin, zipfile.ZipFile(tmp, "w") as zout:
    names = zin.namelist()
    for info in zin.infolist():
        zi = zipfile.ZipInfo(info.filename, info.date_time)
        zi.external_attr = info.external_attr
        zi.compress_type = zipfile.ZIP_DEFLATED
        zout.writestr(zi, zin.read(info), compresslevel=9)
os.replace(tmp, path)
left = [n for n in names if any(n.startswith(p) for p in dropped)]
missing = [m for m in must_keep if m not in names]
if left or missing:
    sys.exit(f"make_ray_wheelhouse: repack wrong: still has {left[:3]}, lacks {missing}")
print(f"{os.path.basename(path)}: {before / 1e6:.2f} MB -> {os.path.getsize(path) / 1e6:.2f} MB "
      f"({len(names)} members; all {len(must_keep)} must-keep files present)")
PYEOF

# replace earlier builds of these distributions (two versions of one name stop the install)
mkdir -p "$WHL"
for f in "$STAGE"/*.whl; do
    n="$(basename "$f")"; n="${n%%-*}"
    for old in "$WHL/$n"-*.whl; do
        [ -e "$old" ] && [ "$(basename "$old")" != "$(basename "$f")" ] && rm -f "$old"
    done
    cmp -s "$f" "$WHL/$(basename "$f")" 2>/dev/null || cp "$f" "$WHL/"
done

echo "== .whl-ray/"
(cd "$WHL" && ls -l *.whl | awk '{printf "%10d  %s\n", $5, $9}' && du -cb *.whl | tail -1 | awk '{printf "%.2f MiB total\n", $1/1048576}')
(cd "$WHL" && sha256sum *.whl >SHA256SUMS)
# the whole payload of a device call: tracked + untracked-not-ignored files, plus .whl-ray
tree_bytes="$(cd "$ROOT" && git ls-files -co --exclude-standard -z | xargs -0 -r stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}')"
carry_bytes="$(du -cb "$WHL" | tail -1 | cut -f1)"
awk -v t="$tree_bytes" -v c="$carry_bytes" 'BEGIN {printf "working tree %.2f MiB + carry (.whl-ray) %.2f MiB = %.2f MiB of the 64 MiB a call may send\n", t/1048576, c/1048576, (t+c)/1048576}'
