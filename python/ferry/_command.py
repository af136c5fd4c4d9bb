"""The `ferry` command of an installed wheel: runs the native `ferry` binary
shipped inside this package, so that `ferry run` starts Python nodes with this
interpreter and this installed package (never a checkout)."""

import os
import sys
from pathlib import Path


def binary():
    """The path of the bundled native `ferry` command."""
    return Path(__file__).resolve().parent / "bin" / "ferry"


def main():
    exe = binary()
    if not exe.exists():
        sys.stderr.write(f"ferry: the native command is missing from this install ({exe})\n")
        return 127
    env = dict(os.environ)
    # Python nodes and runtimes: this interpreter, which imports this package.
    env.setdefault("FERRY_PYTHON", sys.executable)
    os.execve(str(exe), [str(exe), *sys.argv[1:]], env)


if __name__ == "__main__":
    sys.exit(main())
