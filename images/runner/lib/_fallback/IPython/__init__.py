"""Not IPython: the bridge's stand-in, so that notebook code's
`from IPython.display import display` works in its sandbox. It has only
IPython.display.display (the built-in display() of the sandbox, see
docs/sandbox-api.md, "Notebook habits"); an image that installs the real
IPython gets that one instead, as it comes first on sys.path."""
