"""The one exception type the command line turns into a one-line message and exit code 2."""


class UserError(Exception):
    """Bad input from the user: a file, a line or a field that cannot be used as given."""
