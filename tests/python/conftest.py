import os
import sys

# Import the checkout's package (python/ferry with the built extension).
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
