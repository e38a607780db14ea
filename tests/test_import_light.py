"""The core never imports torch or a simulator: `import wamcore` and `wam --help` stay fast."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "mujoco", "robosuite", "libero", "sapien", "ray", "websockets", "zmq")


def test_import_wamcore_imports_nothing_heavy():
    code = "import sys, wamcore, wamcore.cli, wamcore.testing, wamcore.evaluation, wamcore.evaluation.ray_executor, wamcore.serving; print(','.join(m for m in %r if m in sys.modules))" % (HEAVY,)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_wam_help_answers_without_heavy_imports():
    code = "import sys, runpy; sys.argv = ['wam', '--help']\ntry:\n    runpy.run_module('wamcore', run_name='__main__')\nexcept SystemExit:\n    pass\nprint('HEAVY:' + ','.join(m for m in %r if m in sys.modules))" % (HEAVY[:7],)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Commands:" in out.stdout and "run" in out.stdout
    assert out.stdout.strip().endswith("HEAVY:")


def test_eval_help_lists_the_parallel_options_without_importing_ray():
    code = ("import sys\nfrom wamcore.cli import main\ntry:\n    main(['eval', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('HEAVY:' + ','.join(m for m in %r if m in sys.modules))" % (HEAVY[:7],))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    for flag in ("--num-envs", "--am-restarts", "--executor", "--ray-address", "--num-model-workers"):
        assert flag in out.stdout
    assert out.stdout.strip().endswith("HEAVY:")


def test_serve_help_and_the_openpi_plugin_import_no_websockets():
    """websockets is imported only when the openpi protocol (wam-openpi's) is spoken."""
    code = ("import sys\nfrom wamcore.cli import main\nimport wam_openpi.plugin\ntry:\n"
            "    main(['serve', '--protocol', 'openpi', '--am-backend', 'pointmass-wam', '--platform', 'pointmass', '--help'])\n"
            "except SystemExit:\n    pass\nprint('HEAVY:' + ','.join(m for m in %r if m in sys.modules))" % (HEAVY[:7],))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "--protocol NAME|list" in out.stdout and "Serving protocol options (openpi):" in out.stdout
    assert "--default-prompt" in out.stdout and "--session-ttl" not in out.stdout
    assert out.stdout.strip().endswith("HEAVY:")
