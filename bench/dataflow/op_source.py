"""The source operator of py_operator.py as a script of its own (a runtime
loads one class Operator per script)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_operator import Source as Operator  # noqa: E402,F401
