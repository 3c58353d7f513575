"""Skills: Python modules that runs save for later runs.

mcp_tools.save_skill(name, fn_or_source) sends a module's source to the
bridge, which checks it and keeps it in the operator's skills folder;
`from skills import name` in a later run asks the bridge for it and runs it
as the module skills.<name>. The code never sees the folder: every skill
comes and goes over the relay, whole. What a saved function carries with
it is _carry's work, imported by the first save.
"""

import keyword
import re
import sys
import types

from . import _core

# The bridge checks names (internal/skills.CheckName); this is the same
# pattern, for an error before anything is sent.
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
_MAX_DESCRIPTION = 1024


class SkillError(_core.MCPToolsError):
    """A skill could not be saved or loaded; the message says why. `type`
    is the bridge's error type: invalid, denied, limit, skill_exists,
    unknown_skill, skills_unavailable."""

    type = "skill"


def _ask(op, args):
    r = _core.relay()
    try:
        return r.query(op, args)
    except r.ToolError as e:
        raise SkillError(e.message, type=e.type) from None


# --- saving ----------------------------------------------------------------


def save_skill(name, fn_or_source, description="", overwrite=False):
    """Saves a skill that later runs import with `from skills import name`.

    fn_or_source is a function defined in this code (saved with the
    imports, helper functions and constants it uses from the code's
    globals) or a module's source as a string. description says what it
    does: skills() and search() show it. A name that is taken is refused
    unless overwrite=True. Returns {name, bytes, replaced, signature,
    servers}. Raises SkillError when the bridge refuses (the name, the
    size, the folder's count, or a policy that turns saving off) and
    nothing is saved then."""
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, not {type(name).__name__}")
    if not isinstance(description, str):
        raise TypeError(f"description must be a string, not {type(description).__name__}")
    if type(overwrite) is not bool:
        raise TypeError(f"overwrite must be True or False, not {overwrite!r}")
    if not _NAME.match(name):
        raise SkillError(
            f"skill name {name[:80]!r} is not valid: 1 to 64 lower-case letters, digits and '_', starting with a letter",
            type="invalid",
        )
    taken = _taken(name)
    if taken:
        raise SkillError(
            f"skill name {name!r} is taken by {taken}: `from skills import {name}` would read as the other: pick another",
            type="invalid",
        )
    # What saving needs (ast, inspect) is imported only when code saves:
    # importing mcp_tools or a skill does not pay for it.
    from . import _carry

    if isinstance(fn_or_source, str):
        source = fn_or_source
    elif callable(fn_or_source) and hasattr(fn_or_source, "__wrapped__"):
        raise SkillError(
            f"{getattr(fn_or_source, '__name__', 'that function')} is decorated: save the function without its decorator, or the module's source as a string",
            type="invalid",
        )
    elif isinstance(fn_or_source, types.FunctionType):
        source = _carry.function_module(fn_or_source, name)
    else:
        raise TypeError(
            f"save_skill takes a function defined with def, or a module's source as a string, not {type(fn_or_source).__name__}"
        )
    tree = _carry.parse(source, name)
    signature = _carry.signature_of(tree, name)
    servers = _carry.servers_called(tree)
    got = _ask(
        "save_skill",
        {
            "name": name,
            "source": source,
            "description": description.encode()[:_MAX_DESCRIPTION].decode(errors="ignore"),
            "signature": signature,
            "servers": servers,
            "overwrite": overwrite,
        },
    )
    forget(name)
    replaced = bool(got.get("replaced")) if isinstance(got, dict) else False
    return {"name": name, "bytes": len(source.encode()), "replaced": replaced, "signature": signature, "servers": servers}


def _taken(name):
    """What else name stands for in this image, or "": a built-in, or a
    top-level module Python finds here (the standard library's, or an
    installed package's: the bridge knows only the standard images')."""
    import builtins

    if hasattr(builtins, name):
        return "a Python built-in"
    if name in getattr(sys, "stdlib_module_names", sys.builtin_module_names):
        return "a module of Python's standard library"
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    return f"the installed module {name}"


# --- listing and loading ---------------------------------------------------


def skills():
    """The saved skills: a list of {name, description, signature, servers,
    saved, import}, by name. `from skills import <name>` imports one."""
    got = _ask("skills", {})
    if not isinstance(got, list):
        raise SkillError(f"the bridge answered the skills query with {type(got).__name__}, not a list", type="invalid")
    return [
        {
            "name": s.get("name"),
            "description": s.get("description") or "",
            "signature": s.get("signature") or "",
            "servers": list(s.get("servers") or []),
            "saved": s.get("saved"),
            "import": f"from skills import {s.get('name')}",
        }
        for s in got
        if isinstance(s, dict) and isinstance(s.get("name"), str)
    ]


def module_name(name):
    return "skills." + name


def forget(name):
    """Drops a loaded skill, so that the next import reads it again."""
    sys.modules.pop(module_name(name), None)


def load(name):
    """The module of skill name, run once per interpreter."""
    full = module_name(name)
    mod = sys.modules.get(full)
    if mod is not None:
        return mod
    try:
        got = _ask("skill_source", {"name": name})
    except SkillError as e:
        if e.type == "unknown_skill":
            raise ImportError(e.message, name=full) from None
        raise ImportError(f"skill {name!r} cannot be read: {e.message}", name=full) from None
    source = got.get("source") if isinstance(got, dict) else None
    if not isinstance(source, str):
        raise ImportError(f"the bridge sent no source for skill {name!r}", name=full)
    filename = f"<skill {name}>"
    # Tracebacks and inspect.getsource (so a skill can be saved again,
    # under another name or in another skill) read it from linecache.
    import io
    import linecache

    lines = io.StringIO(source, newline=None).readlines()
    linecache.cache[filename] = (len(source), None, lines, filename)
    try:
        code = compile(source, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        raise ImportError(f"skill {name!r} does not compile ({e}): save it again, or remove it with `bridge skills rm {name}` on the host", name=full) from None
    mod = types.ModuleType(full, got.get("description") or None)
    mod.__file__ = filename
    mod.__skill__ = {k: got.get(k) for k in ("name", "description", "signature", "servers", "saved")}
    sys.modules[full] = mod
    try:
        exec(code, mod.__dict__)
    except BaseException:
        sys.modules.pop(full, None)
        raise
    return mod


def attribute(name):
    """skills.<name>: the skill's function of the same name if its module
    defines one, else the module."""
    if not _NAME.match(name) or keyword.iskeyword(name):
        raise AttributeError(f"module 'skills' has no attribute {name!r}")
    mod = load(name)
    value = mod.__dict__.get(name)
    if callable(value) and not isinstance(value, types.ModuleType):
        return value
    return mod


def names():
    try:
        return [s["name"] for s in skills()]
    except Exception:
        return []


for _obj in (SkillError, save_skill, skills):
    _obj.__module__ = "mcp_tools"  # as tracebacks and help() name them
del _obj
