"""python -m rdzv --version: the package's and the loaded library's
releases (they must match)."""
import sys

import rdzv


def main(argv: list[str]) -> int:
    if argv[1:] == ["--version"]:
        print(f"rdzv {rdzv.__version__} (librdzv {rdzv.library_version()})")
        return 0 if rdzv.__version__ == rdzv.library_version() else 1
    print("usage: python -m rdzv --version", file=sys.stderr)
    return 2


sys.exit(main(sys.argv))
