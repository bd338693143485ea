import os
import sys

# the independent reference (potential_reference.py) is imported by name from this folder;
# appended, not prepended, so that `from conftest import random_psd` still finds tests/conftest.py
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)
