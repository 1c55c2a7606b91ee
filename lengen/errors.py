"""The one exception type the command line turns into a clean message and exit code 2."""


class LengenError(ValueError):
    """Bad input: an unknown name, an impossible setting, a run directory that does not match.

    Subclasses ValueError so library callers can catch it the ordinary way.
    """
