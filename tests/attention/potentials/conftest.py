import os
import sys

# the independent reference (potential_reference.py) is imported by name from this folder
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
