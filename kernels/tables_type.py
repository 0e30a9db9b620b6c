"""The tuples of tables kernels take, passed by reference.

numba passes a tuple as its leaves: a Memory tuple of 23 arrays is some 200 machine words,
a call taking a unit's tables, the rings, the MemTables and the Params four hundred. Every
call site flattened them and every kernel's prologue gathered them back, which numba built
in Python one LLVM instruction at a time and LLVM then optimised away kernel by kernel.
Here such a tuple is a pointer to its members, built once where Python calls an entry
point; a field access loads the one member it names, and a call passes the pointer.
"""

from llvmlite import ir
from numba.core import cgutils, types
from numba.core.datamodel import models, register_default
from numba.core.imputils import impl_ret_borrowed, lower_getattr_generic
from numba.core.typing.typeof import typeof_impl
from numba.extending import NativeValue, unbox


class TablesTuple(types.NamedTuple):
    """A namedtuple of tables of different kinds (numba's NamedTuple), by reference."""


class UniformTablesTuple(types.NamedUniTuple):
    """A namedtuple whose members are all of one type (the Params: int64), by reference."""


def _is_tables(t) -> bool:
    return isinstance(t, (TablesTuple, UniformTablesTuple))


def _struct(dmm, fe_type):
    """The members' data, a nested tables tuple's members inline: every table's address is
    then one offset from the pointer an entry point gets, which LLVM can follow."""
    return ir.LiteralStructType([_struct(dmm, t) if _is_tables(t)
                                 else dmm.lookup(t).get_data_type() for t in fe_type])


@register_default(TablesTuple)
@register_default(UniformTablesTuple)
class _ReferenceModel(models.PrimitiveModel):
    """A pointer to the struct of the members (``_struct``)."""

    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _struct(dmm, fe_type).as_pointer())


def _member_pointer(builder, ptr, i):
    return builder.gep(ptr, [ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), i)],
                       inbounds=True)


@lower_getattr_generic(TablesTuple)
@lower_getattr_generic(UniformTablesTuple)
def _tables_getattr(context, builder, typ, value, attr):
    i = typ.fields.index(attr)
    ptr = _member_pointer(builder, value, i)
    if _is_tables(typ[i]):
        return ptr  # a nested tuple is its place in this one
    member = context.data_model_manager[typ[i]].load_from_data_pointer(builder, ptr)
    return impl_ret_borrowed(context, builder, typ[i], member)


@unbox(TablesTuple)
@unbox(UniformTablesTuple)
def _unbox_tables(typ, obj, c):
    """Python's tuple -> the struct, on the stack of the wrapper that calls the entry."""
    ptr = cgutils.alloca_once(c.builder, _struct(c.context.data_model_manager, typ))
    failed = cgutils.alloca_once_value(c.builder, cgutils.false_bit)
    for i, member_type in enumerate(typ):
        native = c.unbox(member_type, c.pyapi.tuple_getitem(obj, i))
        with c.builder.if_then(native.is_error, likely=False):
            c.builder.store(cgutils.true_bit, failed)
        slot = _member_pointer(c.builder, ptr, i)
        if _is_tables(member_type):
            c.builder.store(c.builder.load(native.value), slot)
        else:
            dm = c.context.data_model_manager[member_type]
            c.builder.store(dm.as_data(c.builder, native.value), slot)
    return NativeValue(ptr, is_error=c.builder.load(failed))


class _TablesArgumentAttributes(ir.values.ArgumentAttributes):
    """llvmlite's list of parameter attributes lacks ``readonly``."""

    _known = {**ir.values.ArgumentAttributes._known, "readonly": False}


def mark_tables_arguments(ir_module, target_data=None) -> None:
    """Tell LLVM what a tables pointer argument promises: nothing writes the tuple while a
    kernel runs (``readonly``, ``noalias``), no kernel keeps the pointer
    (``captures(none)``), and it points at the whole tuple (``dereferenceable``). Else a
    pointer is memory any store to a table might change, and LLVM loads a table's address
    again after every such store in the main loop."""
    for fn in ir_module.functions:
        if fn.is_declaration:
            continue
        for arg in fn.args:
            ty = arg.type
            if (arg.name.startswith("arg.") and isinstance(ty, ir.PointerType)
                    and isinstance(ty.pointee, ir.LiteralStructType)):
                arg.attributes.__class__ = _TablesArgumentAttributes
                for attr in ("noalias", "captures(none)", "nonnull", "noundef", "readonly"):
                    arg.add_attribute(attr)
                if target_data is not None:
                    arg.attributes.dereferenceable = ty.pointee.get_abi_size(target_data)
                arg.attributes.align = 8


def _typeof_tables(val, c):
    tys = [typeof_impl(v, c) for v in val]
    if any(t is None for t in tys):
        return None
    if all(t == tys[0] for t in tys):
        return UniformTablesTuple(tys[0], len(tys), type(val))
    return TablesTuple(tys, type(val))


def by_reference(*classes):
    """Type these namedtuple classes (and their subclasses) as tuples passed by reference."""
    for cls in classes:
        typeof_impl.register(cls)(_typeof_tables)


def _register():
    """The engine's tuples. The router network's own (``network/state.py``) stay tuples by
    value: the engine's NoC step builds them inside a kernel from one packed buffer
    (``network/packed.py``), so they never come from Python there, and typed by reference
    where they do (``npusim noc``) every router kernel compiled a second time."""
    from . import state

    by_reference(state.Params, state.ProgramArrays, state.State, state.Rings, state.Cores,
                 state.Crossbar, state.RouterNetwork, state.Memory, state.MemTables)


_register()
