"""Not IPython: the bridge's stand-in, so that notebook code's
`from IPython.display import display` works in its sandbox. It has only
IPython.display.display (the built-in display() of the sandbox, see
docs/sandbox-api.md, "Notebook habits") and get_ipython(), which says, as
the real one does outside an IPython shell, that there is none (libraries
such as matplotlib ask it once IPython is imported). An image that
installs the real IPython gets that one instead: it comes first on
sys.path."""


def get_ipython():
    """None: the code does not run in an IPython shell."""
    return None
