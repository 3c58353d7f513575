"""mcp_tools.show(x): shows a result to the agent in the form that suits it.

Figures and images become PNG files in the outputs folder ($BRIDGE_OUTPUTS,
/tmp/outputs), which come back with the run's result; tables are printed
as Markdown; anything else is printed. matplotlib, PIL and pandas are
recognised by their types' modules, never imported here: show works, and
imports, without them.
"""

import os
import sys

# How image bytes start, and the file extension they get.
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", ".png"),
    (b"\xff\xd8\xff", ".jpg"),
    (b"GIF87a", ".gif"),
    (b"GIF89a", ".gif"),
)

_counters = {}  # prefix -> the last number given, across calls


def show(obj, name=None, *, max_rows=20, max_cols=12):
    """Shows obj to the agent; returns the path of the file it wrote, or None.

    - a matplotlib Figure, Axes, or the pyplot module (its current figure):
      saved as PNG in the outputs folder, as figure-1.png, figure-2.png...;
    - a PIL Image: saved as PNG there, as image-1.png...;
    - bytes of a PNG, JPEG, GIF or WebP image: written there as they are;
    - a pandas DataFrame or Series: printed as a Markdown table, cut to
      max_rows rows (the first and last ones) and max_cols columns;
    - anything else: print(obj).

    Files in the outputs folder come back with the result (images as
    images), within the operator's limits. name gives the file's name in
    that folder instead (an extension is added if it has none; a file of
    that name is replaced).
    """
    if _is(obj, "pandas", ("DataFrame", "Series")):
        print(markdown_table(obj, max_rows=max_rows, max_cols=max_cols))
        return None
    figure = _figure(obj)
    if figure is not None:
        path = _write(name, "figure", ".png", lambda path, fmt: figure.savefig(path, format=fmt))
        # As saved: savefig leaves it stale (it restores the colours it
        # changed), any later change makes it stale again.
        try:
            figure.stale = False
        except AttributeError:
            pass
        _shown_figures().add(figure)
        return path
    if _is(obj, "PIL", ("Image",)) and hasattr(obj, "save"):
        return _write(name, "image", ".png", lambda path, fmt: _pil_save(obj, path, fmt))
    if isinstance(obj, (bytes, bytearray, memoryview)):
        ext = image_type(obj)
        if ext is not None:
            data = bytes(obj)
            return _write(name, "image", ext, lambda path, fmt: _write_bytes(path, data))
    print(obj)
    return None


def was_shown(figure):
    """Whether show() saved this matplotlib figure (the runner does not send
    a figure still open at the end again if it did and it did not change)."""
    return _shown is not None and figure in _shown


_shown = None  # a WeakSet of the figures saved, made with the first


def _shown_figures():
    global _shown
    if _shown is None:
        import weakref

        _shown = weakref.WeakSet()
    return _shown


def image_type(data):
    """The file extension of image bytes (.png, .jpg, .gif, .webp), or None."""
    head = bytes(data[:16])
    for sig, ext in _SIGNATURES:
        if head.startswith(sig):
            return ext
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return ".webp"
    return None


def outputs_dir():
    """The folder whose files come back with the result."""
    return os.environ.get("BRIDGE_OUTPUTS") or "/tmp/outputs"


# --- recognising objects ------------------------------------------------------


def _is(obj, package, names):
    """Whether obj's class, or a base of it, is one of names from package."""
    for cls in type(obj).__mro__:
        module = getattr(cls, "__module__", None) or ""
        if cls.__name__ in names and (module == package or module.startswith(package + ".")):
            return True
    return False


def _figure(obj):
    """The matplotlib figure obj stands for, or None."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None and obj is pyplot:
        return pyplot.gcf()
    if _is(obj, "numpy", ("ndarray",)) and getattr(obj, "dtype", None) == object and obj.size:
        obj = obj.flat[0]  # plt.subplots(2, 2)'s array of Axes
    if (type(obj).__module__ or "").partition(".")[0] not in ("matplotlib", "seaborn"):
        return None
    for _ in range(8):  # an Axes, a SubFigure, a seaborn grid... lead to the figure
        if _is(obj, "matplotlib", ("Figure",)) and hasattr(obj, "savefig"):
            return obj
        obj = getattr(obj, "figure", None)
        if obj is None:
            return None
    return None


# --- writing files ------------------------------------------------------------


def _write(name, prefix, ext, save):
    """Saves through save(path, format) into the outputs folder, under name
    or the next free prefix-N.ext; returns the path."""
    folder = outputs_dir()
    os.makedirs(folder, exist_ok=True)
    if name is not None:
        name = os.fspath(name)
        if not isinstance(name, str) or not name or "/" in name or "\0" in name or name in (".", ".."):
            raise ValueError(f"name must be a file name without '/', not {name!r}")
        if not os.path.splitext(name)[1]:
            name += ext
        path = os.path.join(folder, name)
        save(path, os.path.splitext(name)[1][1:].lower())
        return path
    while True:
        n = _counters.get(prefix, 0) + 1
        _counters[prefix] = n
        path = os.path.join(folder, f"{prefix}-{n}{ext}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))  # claims the name
        except FileExistsError:
            continue
        break
    try:
        save(path, ext[1:])
    except BaseException:
        try:
            os.unlink(path)
        except OSError:
            pass
        raise
    return path


def _write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _pil_save(image, path, fmt):
    fmt = {"jpg": "jpeg", "tif": "tiff"}.get(fmt, fmt)
    if fmt == "png" and image.mode not in ("1", "L", "LA", "I", "I;16", "P", "RGB", "RGBA"):
        image = image.convert("RGBA" if "A" in image.mode else "RGB")  # CMYK, YCbCr, F...
    elif fmt == "jpeg" and image.mode not in ("1", "L", "RGB", "CMYK"):
        image = image.convert("RGB")
    image.save(path, format=fmt.upper())


# --- tables -------------------------------------------------------------------


def markdown_table(frame, max_rows=20, max_cols=12, max_width=40):
    """A pandas DataFrame or Series as a Markdown table: at most max_rows
    rows (the first and the last ones) and max_cols columns (the first and
    the last ones), cells cut to max_width characters, and a note saying
    what was left out. Needs no tabulate, nor pandas itself: it uses the
    frame's shape, index, columns (or name) and iloc."""
    if max_rows < 2 or max_cols < 2:
        raise ValueError("max_rows and max_cols must be at least 2")
    shape = tuple(frame.shape)
    series = len(shape) == 1
    n_rows = shape[0]
    n_cols = 1 if series else shape[1]
    rows = _pick(n_rows, max_rows)
    cols = _pick(n_cols, max_cols)

    def label(value):
        if isinstance(value, tuple):  # a MultiIndex
            return " / ".join(_text(v, max_width) for v in value)
        return _text(value, max_width)

    index = frame.index
    index_names = [n for n in (getattr(index, "names", None) or [getattr(index, "name", None)]) if n is not None]
    header = [" / ".join(_text(n, max_width) for n in index_names)]
    if series:
        header.append(_text(frame.name, max_width) if getattr(frame, "name", None) is not None else "value")
    else:
        header += [label(frame.columns[j]) if j is not None else "…" for j in cols]

    body = []
    numeric = [True] * len(cols)
    for i in rows:
        if i is None:
            body.append(["…"] * (len(cols) + 1))
            continue
        line = [label(index[i])]
        for k, j in enumerate(cols):
            if j is None:
                line.append("…")
                continue
            value = frame.iloc[i] if series else frame.iloc[i, j]
            numeric[k] = numeric[k] and _is_number(value)
            line.append(_text(value, max_width))
        body.append(line)

    align = ["---"] + ["---:" if numeric[k] and rows else "---" for k in range(len(cols))]
    lines = ["| " + " | ".join(cells) + " |" for cells in [header, align] + body]
    notes = []
    if n_rows == 0:
        notes.append("no rows")
    if n_cols == 0:
        notes.append("no columns")
    if n_rows > max_rows or n_cols > max_cols:
        kind = "Series" if series else "DataFrame"
        shown = []
        if n_rows > max_rows:
            shown.append(f"the first {rows.index(None)} and last {len(rows) - rows.index(None) - 1} rows")
        if n_cols > max_cols:
            shown.append(f"the first {cols.index(None)} and last {len(cols) - cols.index(None) - 1} columns")
        notes.append(f"{kind} of {n_rows} rows × {n_cols} columns; showing {' and '.join(shown)}")
    if notes:
        lines.append(f"({'; '.join(notes)})")
    return "\n".join(lines)


def _pick(n, most):
    """The positions to show of n: all, or the first and last ones around
    None (where the rest is left out)."""
    if n <= most:
        return list(range(n))
    head = (most + 1) // 2
    tail = most - head
    return list(range(head)) + [None] + list(range(n - tail, n))


def _is_number(value):
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    kind = getattr(getattr(value, "dtype", None), "kind", None)  # numpy scalars
    return kind in ("i", "u", "f")


def _text(value, width):
    if isinstance(value, float):  # numpy's float64 too
        if value != value:
            text = "NaN"
        else:
            text = f"{value:.6g}"
            if text.lstrip("-").isdigit():
                text += ".0"  # a float stays recognisable: 3.0, not 3
    elif isinstance(value, str):
        text = value
    else:
        text = str(value)
    text = " ".join(text.split()) if ("\n" in text or "\r" in text or "\t" in text) else text
    if len(text) > width:
        text = text[: width - 1] + "…"
    return text.replace("|", "\\|")
