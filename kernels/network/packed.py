"""The router network's state and tables as views of its one buffer, inside a kernel.

A call between kernels that is not inlined passes every array of a tuple argument as a
separate argument (the engine's own tuples go by reference, ``kernels/tables_type.py``, but
not these): the engine's NoC step called out of line with the network's ~40 arrays ran
slower than inlined. Packed into one buffer
(``state.PACKED_TABLES``), the network is two arrays, so its step can be a call of its own
(``router_network.py``) which builds the views it works on when it starts (a few loads
of the layout per table).
"""

from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array

from .state import N_LAYOUT_FIELDS, NOC_STATE_TABLES, NOC_TABLES, NocState, NocTables


def _tuple_type(cls, tables):
    return types.NamedTuple([types.Array(types.int64, dims, "C") for _, dims in tables], cls)


@intrinsic
def network_views(typingctx, mem, layout):
    """(NocState, NocTables) of the packed network ``mem`` laid out as ``layout``. Each view
    is made directly from its offset and shape (numba's ``reshape`` would call a C helper
    per table to check strides)."""
    parts = (_tuple_type(NocState, NOC_STATE_TABLES), _tuple_type(NocTables, NOC_TABLES))
    ret = types.Tuple(parts)

    def codegen(context, builder, sig, args):
        buf = context.make_array(sig.args[0])(context, builder, args[0])
        lay = context.make_array(sig.args[1])(context, builder, args[1])
        intp = context.get_value_type(types.intp)
        item = context.get_constant(types.intp, 8)

        def field(k, j):  # layout[k, j]
            return builder.load(builder.gep(lay.data, [intp(k * N_LAYOUT_FIELDS + j)]))

        values, k = [], 0
        for part in parts:
            views = []
            for aty in part.types:
                shape = [field(k, 1 + d) for d in range(aty.ndim)]
                strides = [item] * aty.ndim
                for d in range(aty.ndim - 2, -1, -1):
                    strides[d] = builder.mul(strides[d + 1], shape[d + 1])
                view = context.make_array(aty)(context, builder)
                populate_array(view, data=builder.gep(buf.data, [field(k, 0)]), shape=shape,
                               strides=strides, itemsize=item, meminfo=None)
                views.append(view._getvalue())
                k += 1
            values.append(context.make_tuple(builder, part, views))
        return context.make_tuple(builder, ret, values)

    return ret(mem, layout), codegen
