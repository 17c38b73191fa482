import sys

from hub.bench import cli

if __name__ == "__main__":
    sys.exit(cli())
