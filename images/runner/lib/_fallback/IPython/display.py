"""Not IPython.display: the bridge's stand-in, with display() alone.

display(x, ...) shows values as the sandbox's built-in display() does: a
pandas DataFrame or Series as a Markdown table, a matplotlib figure or a
PIL image as an image, anything else as its repr.
"""

import builtins

display = builtins.display
__all__ = ["display"]
