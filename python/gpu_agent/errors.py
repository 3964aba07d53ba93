"""The errors gpu_agent raises: each message is the one gpuctl prints."""


class Error(Exception):
    """Something gpu_agent could not do; the message says what and why."""


class InputError(Error, ValueError):
    """A bad input: a file, a value or an argument, named with its line and field."""


class PolicyError(Error):
    """A policy that cannot be found, loaded, given its parameters or run."""
