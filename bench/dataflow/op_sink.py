"""The sink operator of py_operator.py as a script of its own."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from py_operator import Sink as Operator  # noqa: E402,F401
