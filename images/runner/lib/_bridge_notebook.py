"""Jupyter's habits in the bridge's sandbox, for the runner.

The runner (runner.py) installs them before the code runs (install) and
compiles each call's code here (compile_code): as in Jupyter, the value of
the code's last expression statement is shown through sys.displayhook,
display() is a built-in, plt.show() sends the open figures back, and the
figures still open when the code ends come back too (show_open_figures).
Values, figures and images go through mcp_tools.show; docs/sandbox-api.md,
"Notebook habits", is the reference. This module is loaded at every start:
it imports nothing, and nothing here imports matplotlib, pandas or PIL.
"""

import _ast
import builtins
import os
import sys
from _ast import PyCF_ALLOW_TOP_LEVEL_AWAIT, PyCF_ONLY_AST

_BUILTIN_PRINT = builtins.print
# Stand-ins for packages notebook code imports (IPython.display), after the
# real ones on sys.path.
_FALLBACK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_fallback")
# Words that begin a statement that is not an expression.
_STATEMENT_WORDS = frozenset(
    "import from def class return pass break continue raise del global nonlocal assert "
    "with try while for if elif else except finally async".split()
)
_QUOTED = None  # a regex of one-line string literals, compiled when first needed


def install():
    """display() as a built-in, sys.displayhook, a finder that patches
    matplotlib.pyplot when it is first imported, and the IPython stand-in."""
    builtins.display = display
    sys.displayhook = displayhook
    sys.meta_path.insert(0, PyplotFinder)
    sys.path.append(_FALLBACK_DIR)


# --- showing values -----------------------------------------------------------


def _plain(value):
    """Whether value's repr is all there is to show of it: a built-in
    type's, and not a list or tuple of something else (plt.plot's lines)."""
    if type(value).__module__ != "builtins":
        return False
    if isinstance(value, (list, tuple)) and value:
        return type(value[0]).__module__ == "builtins"
    return True


def displayhook(value):
    """sys.displayhook in the sandbox: shows the value of the code's last
    expression as Jupyter does (see display); None shows nothing."""
    if value is not None:
        display(value)


def display(*objs):
    """display(x, ...) shows each value as Jupyter does: a pandas DataFrame
    or Series as a Markdown table (as mcp_tools.show prints it), a
    matplotlib figure, Axes or plot, or a PIL image, as a PNG in the
    outputs folder, which comes back as an image; anything else as its
    repr."""
    for obj in objs:
        if _plain(obj):
            print(repr(obj))
        else:
            show_value(obj)


def show_value(value):
    """Shows value as Jupyter's inline display does: a pandas DataFrame or
    Series as a Markdown table, a matplotlib figure (an Axes, plt.plot's
    lines...) or a PIL image as a PNG in the outputs folder, anything else
    as its repr."""
    from mcp_tools import _show

    if _show._is(value, "pandas", ("DataFrame", "Series")):
        print(_show.markdown_table(value))
        return
    figure = _figure(value)
    if figure is not None:
        _show.show(figure)
        return
    if _show._is(value, "PIL", ("Image",)) and hasattr(value, "save"):
        _show.show(value)
        return
    print(repr(value))


def _figure(value):
    from mcp_tools import _show

    if isinstance(value, (list, tuple)) and value:
        value = value[0]  # plt.plot's list of lines
        if (type(value).__module__ or "").partition(".")[0] != "matplotlib":
            return None
    return _show._figure(value)


def show_open_figures(raise_errors=False, save=True):
    """Shows each open pyplot figure (one that mcp_tools.show saved and
    that did not change since is not sent again) and closes them all.
    An error saving one is written to stderr, or raised if raise_errors.
    Without save (the code was interrupted: a session's timeout leaves the
    runner a few seconds to answer) they are closed unsaved."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    if not save:
        pyplot.close("all")
        return
    from mcp_tools import _show

    for num in pyplot.get_fignums():
        figure = pyplot.figure(num)
        try:
            if not (_show.was_shown(figure) and not figure.stale):
                _show.show(figure)
        except Exception as e:
            if raise_errors:
                raise
            print(f"figure {num} could not be shown: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            pyplot.close(figure)


def pyplot_spec(name, path, target, skip):
    """The spec the other finders find for matplotlib.pyplot, its loader
    made to patch the module once it ran (runner.PyplotFinder)."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if finder is skip or find is None:
            continue
        spec = find(name, path, target)
        if spec is not None:
            break
    else:
        return None
    loader = spec.loader
    run = getattr(loader, "exec_module", None)
    if run is None:
        return spec

    def exec_module(module):
        run(module)
        _patch(module)

    try:
        loader.exec_module = exec_module  # this loader object is pyplot's alone
    except AttributeError:
        pass
    return spec


def _patch(pyplot):
    original = pyplot.show

    def show(*args, **kwargs):
        """matplotlib.pyplot.show() in the bridge's sandbox: as in Jupyter,
        each open figure comes back as an image (a PNG in the outputs
        folder, through mcp_tools.show), then is closed. Arguments such as
        block=False are accepted and have no effect."""
        show_open_figures(raise_errors=True)

    show.__wrapped__ = original
    show.__module__ = pyplot.__name__
    pyplot.show = show


class PyplotFinder:
    """A meta path finder that finds nothing itself: when matplotlib.pyplot
    is first imported, it has it patched so that plt.show() sends the open
    figures back (pyplot_spec). Any other name costs one comparison."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "matplotlib.pyplot":
            return None
        return pyplot_spec(name, path, target, PyplotFinder)


# --- the last expression ------------------------------------------------------


def compile_code(source, lines, filename, namespace):
    """Compiles the code (lines: its lines, as the compiler splits them;
    namespace: its globals) with its last expression statement, if any and
    not ended by ';', made a call of sys.displayhook with its value. Through
    the AST only when the last line may hold such a statement; an error
    there is raised by the plain compile, as Python reports it."""
    flags = PyCF_ALLOW_TOP_LEVEL_AWAIT
    if may_show_last(lines, source, namespace):
        try:
            tree = compile(source, filename, "exec", flags=flags | PyCF_ONLY_AST, dont_inherit=True)
            last = tree.body[-1] if tree.body else None
            if type(last) is _ast.Expr and not _ends_with_semicolon(lines, last):
                last.value = _call_displayhook(last.value)
            return compile(tree, filename, "exec", flags=flags, dont_inherit=True)
        except Exception:
            pass  # a SyntaxError, say
    return compile(source, filename, "exec", flags=flags, dont_inherit=True)


def _call_displayhook(value):
    """__import__("sys").displayhook(value), at value's place in the source,
    so that a traceback shows its line."""
    pos = {"lineno": value.lineno, "col_offset": value.col_offset, "end_lineno": value.end_lineno, "end_col_offset": value.end_col_offset}
    imp = _ast.Call(func=_ast.Name(id="__import__", ctx=_ast.Load(), **pos), args=[_ast.Constant(value="sys", **pos)], keywords=[], **pos)
    hook = _ast.Attribute(value=imp, attr="displayhook", ctx=_ast.Load(), **pos)
    return _ast.Call(func=hook, args=[value], keywords=[], **pos)


def _ends_with_semicolon(lines, stmt):
    """Whether a ';' follows the statement on its last line (Jupyter's way
    of not showing a value)."""
    line = lines[stmt.end_lineno - 1].encode("utf-8", "surrogatepass")  # the offsets count UTF-8 bytes
    return line[stmt.end_col_offset :].lstrip().startswith(b";")


def may_show_last(lines, source, namespace):
    """False only when the code's last statement is certainly not an
    expression whose value would show: its last line is a whole logical
    line at column 0 that begins with a statement's keyword, assigns, or is
    one call of the built-in print. A few microseconds; parsing into an
    AST and compiling that costs about 12 µs a line more than compiling."""
    global _QUOTED
    i = len(lines) - 1
    while i >= 0:
        text = lines[i].strip()
        if text and not text.startswith("#"):
            break
        if "'" in text or '"' in text:
            return True  # perhaps the end of a string that spans lines
        i -= 1
    if i < 0:
        return False  # no statement at all
    line = lines[i].rstrip("\r\n")
    if line[:1] in (" ", "\t", "\f") or (i > 0 and lines[i - 1].rstrip("\r\n").endswith("\\")):
        return True  # inside a block, or a continued line
    if "'" in line or '"' in line:
        if _QUOTED is None:
            import re

            _QUOTED = re.compile(r"""[rRbBuUfF]*(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""")
        line = _QUOTED.sub("s", line)
        if "'" in line or '"' in line:
            return True  # a string that spans lines
    line = line.partition("#")[0].rstrip()
    if ";" in line or "lambda" in line:
        return True
    depth = 0
    assigns = False
    first_close = -1  # where the depth first came back to 0
    for k, c in enumerate(line):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth < 0:
                return True  # closes a bracket of an earlier line: a continuation
            if depth == 0 and first_close < 0:
                first_close = k
        elif c == "=" and depth == 0 and line[k - 1 : k] not in ("=", "<", ">", "!") and line[k + 1 : k + 2] != "=":
            assigns = True
    if depth != 0:
        return True  # not valid Python: the plain compile says so
    if line.startswith("print(") and first_close == len(line) - 1:
        # One call of print, which returns None if it is the built-in.
        return "print" in namespace or builtins.print is not _BUILTIN_PRINT or source.count("print") != source.count("print(") or "def print" in source
    words = line.split(None, 1)
    word = words[0].partition("(")[0] if words else ""
    return not (assigns or word in _STATEMENT_WORDS or line.startswith("@"))
