# Prepare a bare device machine for `wam eval --executor ray` (Ray's local cluster). SOURCE it
# from the repo root, first in a device call (the call must carry .whl-ray):
#
#     run(command="source bench/device/setup_ray.sh && python bench/eval_throughput.py --executor local,ray ...",
#         carry=[".whl-ray"])
#
# What it does (about 10-20 s):
#   1. installs .whl-ray/*.whl (bench/device/make_ray_wheelhouse.sh: ray 2.60.0+wamcore.bench,
#      pyzmq, jsonschema and its deps) with --no-deps into $WAM_SITE (default /tmp/site-ray),
#      offline;
#   2. installs wamcore and wam-pointmass from this checkout, offline, editable
#      (--no-deps --no-build-isolation --no-index -e), into the environment of `python3`;
#      if that environment is not writable, non-editable into $WAM_SITE instead;
#   3. exports PYTHONPATH=$WAM_SITE:...:<repo>/bench (bench/ last: WAMCORE_PLUGIN_MODULES=gpu_wam
#      works, and nothing there shadows an installed package), PYTHONUNBUFFERED=1,
#      RAY_USAGE_STATS_ENABLED=0 (no network there), and puts `wam` and `ray` on PATH;
#   4. prints the versions of ray, wamcore and of what ray takes from the image, and checks
#      ray's minimums (packaging>=24.2, protobuf>=3.20.3, msgpack>=1,<2, click>=7).
#
# Ray's workers see this PYTHONPATH: ray.init() starts gcs_server and the raylet as children of
# the driver with its environment, the raylet starts workers with its own, and RayEvaluation
# passes PYTHONPATH and WAMCORE_PLUGIN_MODULES again in each actor's runtime_env env_vars. The
# device's NCCL_NVLS_ENABLE=0 & co. reach the actors the same way. WAM_RAY_SELFTEST=1 checks
# it: a local cluster, one actor with a runtime_env and one without, each reporting its
# PYTHONPATH, node id and address (adds about 10 s).
#
# Later commands of the same call must ADD to PYTHONPATH, never replace it
# (PYTHONPATH=$PYTHONPATH:x, not PYTHONPATH=x): the wheels live there.
# Returns non-zero (without exiting the calling shell) on failure.

_wam_setup_ray() {
    local root site py t0
    root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)" || return 1
    site="${WAM_SITE:-/tmp/site-ray}"
    py="${WAM_PYTHON:-python3}"
    t0=$(date +%s)

    if ! ls "$root"/.whl-ray/*.whl >/dev/null 2>&1; then
        echo "setup_ray.sh: no .whl-ray/*.whl (carry .whl-ray; bench/device/make_ray_wheelhouse.sh builds them)" >&2
        return 1
    fi
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
        "$root"/.whl-ray/*.whl || return 1

    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}:$root/bench"
    if ! "$py" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
            -e "$root" -e "$root/plugins/pointmass" 2>/tmp/wam-setup-ray-editable.log; then
        echo "setup_ray.sh: editable install failed (see /tmp/wam-setup-ray-editable.log); installing into $site" >&2
        "$py" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --upgrade \
            --target "$site" "$root" "$root/plugins/pointmass" || return 1
    fi
    export PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$site/bin:$PATH"
    export PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0

    "$py" - <<'EOF' || return 1
import importlib.metadata as md
import sys
from packaging.version import Version
import ray, zmq, jsonschema, wamcore, wam_pointmass  # noqa: F401
from wamcore.evaluation.ray_executor import RayEvaluation  # noqa: F401
mins = {"packaging": "24.2", "protobuf": "3.20.3", "msgpack": "1.0.0", "click": "7.0"}
names = ["ray", "pyzmq", "jsonschema", "wamcore", "wam-pointmass", "numpy", *mins, "pyyaml", "requests",
         "filelock", "grpcio", "aiohttp", "psutil"]
vers = {}
for n in names:
    try:
        vers[n] = md.version(n)
    except md.PackageNotFoundError:
        vers[n] = "missing"
print("setup_ray.sh:", ", ".join(f"{n} {v}" for n, v in vers.items()), f"(ray.__version__ {ray.__version__})")
bad = [f"{n} {vers[n]} < {m}" for n, m in mins.items() if vers[n] == "missing" or Version(vers[n]) < Version(m)]
if vers["msgpack"] != "missing" and Version(vers["msgpack"]) >= Version("2"):
    bad.append(f"msgpack {vers['msgpack']} >= 2")
if bad:
    sys.exit("setup_ray.sh: ray 2.60.0 needs " + "; ".join(bad))
EOF

    if [ "${WAM_RAY_SELFTEST:-0}" = 1 ]; then
        "$py" - <<'EOF' || return 1
import os, time
import ray
t0 = time.time()
ray.init(include_dashboard=False, log_to_driver=False)

@ray.remote
class Probe:
    def info(self):
        import wamcore  # noqa: F401  (found through PYTHONPATH)
        return {"pid": os.getpid(), "pythonpath": os.environ.get("PYTHONPATH"), "var": os.environ.get("WAM_PROBE"),
                "node": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()}

nodes = [n for n in ray.nodes() if n.get("Alive")]
with_env = ray.get(Probe.options(num_cpus=0, runtime_env={"env_vars": {"WAM_PROBE": "1"}}).remote().info.remote())
inherited = ray.get(Probe.options(num_cpus=0).remote().info.remote())
ray.shutdown()
assert with_env["var"] == "1" and inherited["pythonpath"] == os.environ["PYTHONPATH"], (with_env, inherited)
print(f"setup_ray.sh: selftest ok in {time.time() - t0:.1f} s: {len(nodes)} node(s), "
      f"CPU {nodes[0]['Resources'].get('CPU')}, GPU {nodes[0]['Resources'].get('GPU', 0)}, "
      f"address {inherited['ip']}; actors see PYTHONPATH={inherited['pythonpath']}")
EOF
    fi
    echo "setup_ray.sh: ready in $(( $(date +%s) - t0 )) s (PYTHONPATH=$PYTHONPATH)"
}
_wam_setup_ray
