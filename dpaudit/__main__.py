"""``python -m dpaudit`` is the same as the ``dpaudit`` console script."""

from dpaudit.cli import main

if __name__ == "__main__":
    main()
