"""What mcp_tools.save_skill carries of a function: the source of a module
that defines it with what it uses from its code's globals (the modules, as
imports; the functions and classes of the code or of skills, as their
source, read from linecache, where the runner keeps the code it runs;
constants, as their repr), and what the skill says of itself (its
signature, the servers it calls). Imported only when code saves a skill."""

import ast
import builtins
import inspect
import sys
import textwrap
import types

from . import _core
from ._skills import SkillError

_MAX_SIGNATURE = 512  # bytes of a signature (the bridge's bound)
_MAX_CONSTANT = 16 << 10  # bytes of one constant's repr carried into a skill
_CALLS = frozenset({"call", "acall", "call_raw", "acall_raw"})


def parse(source, name):
    """source's syntax tree, once it compiles as skill name's module."""
    filename = f"<skill {name}>"
    try:
        tree = ast.parse(source, filename)
        compile(tree, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        where = f" (line {e.lineno})" if getattr(e, "lineno", None) else ""
        raise SkillError(f"the skill's source does not compile{where}: {e.msg if isinstance(e, SyntaxError) else e}", type="invalid") from None
    return tree


def function_module(fn, name):
    """The source of a module that defines fn (and name, if fn has another
    name) with what fn needs from its code's globals."""
    if fn.__name__ == "<lambda>":
        raise SkillError("save a function defined with def, not a lambda", type="invalid")
    if "<locals>" in fn.__qualname__:
        raise SkillError(
            f"{fn.__name__} is defined inside another function: define it at the top level of the code to save it",
            type="invalid",
        )
    if fn.__closure__:
        free = ", ".join(fn.__code__.co_freevars)
        raise SkillError(f"{fn.__name__} uses variables of an enclosing scope ({free}): pass them as arguments", type="invalid")
    parts = _Parts()
    parts.add_definition(fn.__name__, fn)
    source = parts.render()
    if name != fn.__name__:
        if name in parts.names:
            raise SkillError(
                f"the skill's name {name!r} is also a global that {fn.__name__} uses: save it under another name",
                type="invalid",
            )
        source += f"\n{name} = {fn.__name__}\n"
    return source


def _defined_in_code(value):
    """Whether value is a function or class of the run's code or of a
    skill: carried by its source."""
    module = getattr(value, "__module__", None)
    return isinstance(value, (types.FunctionType, type)) and isinstance(module, str) and (module == "__main__" or module.startswith("skills."))


_CO_FUTURE_ANNOTATIONS = 0x1000000  # __future__.annotations.compiler_flag


class _Parts:
    """What a saved function needs, collected from the globals of each
    definition it carries (the run's code, or a skill it imported)."""

    def __init__(self):
        self.imports = {}  # name -> import line
        self.constants = {}  # name -> assignment line
        self.definitions = []  # source of functions and classes, dependencies first
        self.objects = {}  # name -> the object carried under it
        self.future_annotations = False

    @property
    def names(self):
        return set(self.objects)

    def claim(self, name, value, user):
        """Takes name for value; False if it already has it."""
        had = self.objects.get(name, _MISSING)
        if had is value:
            return False
        if had is not _MISSING:
            raise SkillError(f"{user} uses {name!r}, and another global of that name is carried already: rename one of them", type="invalid")
        self.objects[name] = value
        return True

    def add_definition(self, name, obj):
        if not self.claim(name, obj, name):
            return
        src = _source(obj)
        code = getattr(obj, "__code__", None)
        if code is not None and code.co_flags & _CO_FUTURE_ANNOTATIONS:
            self.future_annotations = True
        globals_ = getattr(obj, "__globals__", None)
        if globals_ is None:  # a class: its methods' globals, else its module's
            methods = [v for v in vars(obj).values() if isinstance(v, types.FunctionType) and v.__module__ == obj.__module__]
            globals_ = methods[0].__globals__ if methods else getattr(sys.modules.get(obj.__module__), "__dict__", {})
        for used in sorted(_global_names(src)):
            self.add_global(used, name, globals_)
        self.definitions.append(src)

    def add_global(self, name, user, globals_):
        if name.startswith("__") and name.endswith("__"):
            return  # __name__, __file__...: the skill's module has its own
        if name not in globals_:
            return  # a builtin, a name bound in a class body, or a NameError as before
        value = globals_[name]
        if getattr(builtins, name, _MISSING) is value:
            return
        if isinstance(value, types.ModuleType):
            mod = value.__name__
            if mod.startswith("skills."):
                raise SkillError(
                    f"{user} uses the skill module {name!r}: import it inside the function (from skills import {mod[7:]})",
                    type="invalid",
                )
            if self.claim(name, value, user):
                self.imports[name] = f"import {mod}" if mod == name else f"import {mod} as {name}"
            return
        if callable(value) and hasattr(value, "__wrapped__") and _defined_in_code(inspect.unwrap(value)):
            raise SkillError(f"{user} uses {name}, which is decorated: a skill cannot carry it; save the module's source as a string", type="invalid")
        if _defined_in_code(value):
            if isinstance(value, types.FunctionType) and (value.__closure__ or "<locals>" in value.__qualname__):
                raise SkillError(f"{user} uses {name}, which is not defined at the top level of the code", type="invalid")
            if getattr(value, "__name__", name) != name:
                raise SkillError(f"{user} uses {name}, another name of {value.__name__}: use {value.__name__} itself", type="invalid")
            self.add_definition(name, value)
            return
        line = _import_line(name, value) or _constant_line(name, value)
        if line:
            if self.claim(name, value, user):
                (self.imports if line.startswith(("from ", "import ")) else self.constants)[name] = line
            return
        raise SkillError(
            f"{user} uses the global {name!r}, a {type(value).__name__}, which a skill cannot carry: "
            "pass it as an argument, or save the module's source as a string",
            type="invalid",
        )

    def render(self):
        head = [self.imports[n] for n in sorted(self.imports)] + [self.constants[n] for n in sorted(self.constants)]
        if self.future_annotations:
            head.insert(0, "from __future__ import annotations")
        out = "\n".join(head)
        if out:
            out += "\n\n\n"
        return out + "\n\n".join(d.rstrip("\n") + "\n" for d in self.definitions)


def _source(obj):
    """obj's source, dedented. inspect finds a function's by its code; a
    class of the run's code is looked for in the code's lines, since the
    runner's __main__ has no file to find it in."""
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        pass
    if isinstance(obj, type):
        src = _class_source(obj)
        if src is not None:
            return src
    raise SkillError(
        f"the source of {obj.__name__} cannot be found: save a function defined in this run's code, or pass the module's source as a string",
        type="invalid",
    )


def _class_source(cls):
    """The source of the top-level class cls in the code the runner ran:
    the file of one of its methods if it has one, else the latest piece of
    code that defines a class of that name."""
    import linecache

    files = []
    for v in vars(cls).values():
        f = getattr(v, "__func__", v)
        code = getattr(f, "__code__", None) or getattr(getattr(v, "fget", None), "__code__", None)
        if code is not None and code.co_filename in linecache.cache:
            files.append((code.co_filename, code.co_firstlineno))
            break
    if not files:
        names = [n for n in linecache.cache if n == "<code>" or (n.startswith("<code ") and n.endswith(">"))]
        names.sort(key=lambda n: 0 if n == "<code>" else int(n[6:-1]) if n[6:-1].isdigit() else -1, reverse=True)
        files = [(n, None) for n in names]
    for filename, line in files:
        lines = linecache.getlines(filename)
        try:
            tree = ast.parse("".join(lines))
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if line is None or first <= line <= node.end_lineno:
                    return textwrap.dedent("".join(lines[first - 1 : node.end_lineno]))
    return None


_MISSING = object()


def _global_names(src):
    """The names obj's definition reads as globals: its source compiled
    alone, every code object in it walked for the instructions that load a
    global or module-level name (decorators, defaults, bases and class
    bodies included). Local variables are never among them."""
    import dis

    try:
        code = compile(src, "<skill part>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return set()
    names = set()
    todo = [code]
    while todo:
        c = todo.pop()
        for ins in dis.get_instructions(c):
            if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(ins.argval, str):
                names.add(ins.argval)
        todo.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    return names


def _import_line(name, value):
    """`from module import x as name` when value is module.x, importable."""
    mod = getattr(value, "__module__", None)
    attr = getattr(value, "__name__", None)
    if not isinstance(mod, str) or not isinstance(attr, str) or mod == "__main__":
        return None
    try:
        if getattr(sys.modules.get(mod), attr, _MISSING) is not value:
            return None
    except Exception:
        return None
    return f"from {mod} import {attr}" if attr == name else f"from {mod} import {attr} as {name}"


def _constant_line(name, value):
    """`name = <repr>` for a value that a literal gives back equal."""
    try:
        text = repr(value)
        if len(text) > _MAX_CONSTANT or ast.literal_eval(text) != value:
            return None
    except Exception:
        return None
    return f"{name} = {text}"


def signature_of(tree, name):
    """The signature of the module's function name (or of the function a
    trailing `name = other` names), as "(a, b=1) -> int"; "" for none."""
    target = name
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name
            and isinstance(node.value, ast.Name)
        ):
            target = node.value.id
    for node in reversed(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == target:
            sig = f"({ast.unparse(node.args)})"
            if node.returns is not None:
                sig += f" -> {ast.unparse(node.returns)}"
            if isinstance(node, ast.AsyncFunctionDef):
                sig = "async " + sig
            return sig if len(sig.encode()) <= _MAX_SIGNATURE else sig[: _MAX_SIGNATURE // 4] + "...)"
    return ""


def servers_called(tree):
    """The upstream servers the source calls, as far as reading it tells:
    call("server", ...) and its kin with a literal server name, and the
    server modules it imports or reaches as mcp_tools.<module>."""
    found = []
    modules = []

    def add(lst, v):
        if v not in lst:
            lst.append(v)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            f = node.func
            fname = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
            first = node.args[0]
            if fname in _CALLS and isinstance(first, ast.Constant) and isinstance(first.value, str):
                add(found, first.value)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "mcp_tools":
            if node.attr not in _core.RESERVED:
                add(modules, node.attr)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "mcp_tools":
                for a in node.names:
                    if a.name not in _core.RESERVED:
                        add(modules, a.name)
            elif node.module.startswith("mcp_tools."):
                add(modules, node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("mcp_tools."):
                    add(modules, a.name.split(".")[1])
    if modules:
        try:
            by_module = {s["module"]: s["name"] for s in _core.server_list()}
        except _core.MCPToolsError:
            by_module = {}
        for m in modules:
            add(found, by_module.get(m, m))
    return found[:64]


