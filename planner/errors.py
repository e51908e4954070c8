"""The one exception type a user can cause. The CLI turns it into one line on stderr and exit 2."""


class SpecError(ValueError):
    """Bad input: an unknown name, a malformed file, a layout the model can't run, a bad size."""
