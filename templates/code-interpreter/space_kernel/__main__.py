import sys

from space_kernel.cli import main

sys.exit(main(sys.argv[1:]))
