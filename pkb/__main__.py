"""`python -m pkb ...` is the `pkb-analyze` command."""

from pkb.cli import main

if __name__ == "__main__":
    main()
