"""Errors that the CLI turns into a one-line message and exit status 2."""


class UserError(ValueError):
    """Bad input from the user: unknown key, malformed option, missing data.

    The CLI prints ``str(err)`` on one line and exits with status 2, no traceback.
    """
