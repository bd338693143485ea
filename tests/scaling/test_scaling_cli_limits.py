"""``attndyn scaling``: sizes refused before allocation, no compilation for --list or bad input."""

import subprocess
import sys

from attndyn.cli import main


def test_huge_range_refused_before_allocating(capsys):
    assert main(["scaling", "critical_N", "--C", "1:1e30:1000000000", "--xi", "1", "--L", "2",
                 "--d", "2"]) == 2
    err = capsys.readouterr().err
    assert "--C" in err and "1000000000" in err and len(err.strip().splitlines()) == 1


def _kernels_loaded_after(args):
    code = ("import sys\nfrom attndyn.cli import main\n"
            f"rc = main({args!r})\n"
            "print(rc, 'attndyn.numeric.scaling._kernels' in sys.modules, "
            "any(m.startswith('numba') for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    return out.stdout.strip().splitlines()[-1].split()


def test_list_and_bad_input_compile_nothing():
    rc, kern, numba = _kernels_loaded_after(["scaling", "--list"])
    assert rc == "0" and kern == "False" and numba == "False"
    rc, kern, numba = _kernels_loaded_after(["scaling", "critical_N", "--C", "-1", "--xi", "1",
                                             "--L", "2", "--d", "2"])
    assert rc == "2" and kern == "False"
