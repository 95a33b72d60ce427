"""Errors the command line reports as one line and exit status 2."""


class InputError(Exception):
    """Bad input from the user: a file, a spec, a value. The message names it."""
