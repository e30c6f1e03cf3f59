"""The one exception type for mistakes a user can fix.

Library code raises :class:`UserInputError` with a one-line message that names the file, line or
option at fault and says what to do. The command line turns it into a one-line error and exit
code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserInputError(ValueError):
    """Bad input from the user: a file, a line of a file, or an option.

    The message is shown as-is, on one line, so it must say what is wrong and how to fix it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
