# SPDX-License-Identifier: Apache-2.0
"""Every collective's arguments checked in Python before the C call (counts between send and recv, types, writable
outputs, ranks, roots, peers, the fused norm's shapes and scales): a mistake is a ValueError or TypeError naming the
argument, not a C error code."""
import math

from ._buffers import _as_buffer, _enum_member, _is_torch_tensor, _op_of, _stream_handle, _stream_of
from ._enums import DataType, ScaleMode


def _all_reduce_arguments(send, recv, op, stream):
    """Everything fcclAllReduce needs, checked in Python first: (send, recv, op, stream handle)."""
    send_buffer = _as_buffer(send, "send")
    recv_buffer = send_buffer if recv is None or recv is send else _as_buffer(recv, "recv")
    if send_buffer.dtype != recv_buffer.dtype:
        raise ValueError(f"send is {send_buffer.dtype.name} but recv is {recv_buffer.dtype.name}")
    if send_buffer.count != recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    if recv_buffer.readonly:
        raise ValueError("recv is read-only (its __cuda_array_interface__ says so)")
    reduction = _op_of(op)
    tensor = send_buffer.torch_tensor if send_buffer.torch_tensor is not None else recv_buffer.torch_tensor
    handle = _stream_handle(stream, tensor.device if tensor is not None else None)
    return send_buffer, recv_buffer, reduction, handle


def _pair(send, recv, send_name="send", recv_name="recv"):
    """send and recv as buffers of one type, recv writable; recv None or send itself: the same buffer."""
    send_buffer = _as_buffer(send, send_name)
    recv_buffer = send_buffer if recv is None or recv is send else _as_buffer(recv, recv_name)
    if send_buffer.dtype != recv_buffer.dtype:
        raise ValueError(f"{send_name} is {send_buffer.dtype.name} but {recv_name} is {recv_buffer.dtype.name}")
    if recv_buffer.readonly:
        raise ValueError(f"{recv_name} is read-only (its __cuda_array_interface__ says so)")
    return send_buffer, recv_buffer


def _check_nranks(nranks):
    if not isinstance(nranks, int) or isinstance(nranks, bool) or nranks < 1:
        raise ValueError(f"nranks must be a positive int, got {nranks!r}")


def _all_gather_arguments(send, recv, nranks, stream):
    """Everything fcclAllGather needs, checked in Python first: (send, recv, stream handle). recv holds nranks x
    send's elements; in place when send is this rank's block of recv (a view of it)."""
    _check_nranks(nranks)
    if recv is None:
        raise ValueError("recv is required: it holds every rank's send")
    send_buffer, recv_buffer = _pair(send, recv)
    if recv_buffer.count != nranks * send_buffer.count:
        raise ValueError(f"recv has {recv_buffer.count} elements; an all-gather of {send_buffer.count} over {nranks} "
                         f"ranks needs {nranks * send_buffer.count}")
    return send_buffer, recv_buffer, _stream_of(stream, send_buffer, recv_buffer)


def _reduce_scatter_arguments(send, recv, op, nranks, stream):
    """Everything fcclReduceScatter needs, checked in Python first: (send, recv, op, stream handle). send holds
    nranks x recv's elements; in place when recv is this rank's block of send (a view of it)."""
    _check_nranks(nranks)
    if recv is None:
        raise ValueError("recv is required: it holds this rank's block of the reduction")
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != nranks * recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements; a reduce-scatter into {recv_buffer.count} over "
                         f"{nranks} ranks needs {nranks * recv_buffer.count}")
    reduction = _op_of(op)
    return send_buffer, recv_buffer, reduction, _stream_of(stream, send_buffer, recv_buffer)


def _variable_counts(counts, nranks):
    """counts as a list of nranks non-negative ints (host counts), or as a buffer of nranks int64 in device memory
    (a CUDA tensor or __cuda_array_interface__): (host list or None, device buffer or None)."""
    if _is_torch_tensor(counts) or hasattr(counts, "__cuda_array_interface__"):
        buffer = _as_buffer(counts, "counts")
        if buffer.dtype != DataType.int64:
            raise TypeError(f"counts in device memory are {buffer.dtype.name}; int64 expected")
        if buffer.count != nranks:
            raise ValueError(f"counts has {buffer.count} elements; one per rank ({nranks}) expected")
        return None, buffer
    if isinstance(counts, (str, bytes)):
        raise TypeError(f"counts must be ints, one per rank, not {type(counts).__name__}")
    try:
        values = list(counts)
    except TypeError:
        raise TypeError(f"counts must be ints, one per rank, or an int64 CUDA tensor, not "
                        f"{type(counts).__name__}") from None
    if len(values) != nranks:
        raise ValueError(f"counts has {len(values)} entries; one per rank ({nranks}) expected")
    for rank, value in enumerate(values):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"counts[{rank}] = {value!r} is not a non-negative int")
    return values, None


def _variable_arguments(send, recv, counts, op, nranks, rank, reduces, stream):
    """Everything fcclAllGatherV / fcclReduceScatterV (or their device-count forms) need, checked in Python first:
    (send, recv, host counts or None, device counts or None, op or None, stream handle). With host counts the
    buffers hold exactly what the call moves (the all-gather's recv and the reduce-scatter's send: the sum of the
    counts; the other: counts[rank]); with device counts they are the capacities, and every count must fit them
    when the call runs."""
    _check_nranks(nranks)
    if recv is None:
        raise ValueError("recv is required" + (": it holds this rank's block of the reduction" if reduces
                                               else ": it holds every rank's block"))
    send_buffer, recv_buffer = _pair(send, recv)
    host, device = _variable_counts(counts, nranks)
    if host is not None:
        total, mine = sum(host), host[rank]
        whole, own = (send_buffer, recv_buffer) if reduces else (recv_buffer, send_buffer)
        whole_name, own_name = ("send", "recv") if reduces else ("recv", "send")
        if whole.count != total:
            raise ValueError(f"{whole_name} has {whole.count} elements; the counts add up to {total}")
        if own.count != mine:
            raise ValueError(f"{own_name} has {own.count} elements; counts[{rank}] is {mine}")
    reduction = _op_of(op) if reduces else None
    buffers = (send_buffer, recv_buffer) + ((device,) if device is not None else ())
    return send_buffer, recv_buffer, host, device, reduction, _stream_of(stream, *buffers)


def _broadcast_arguments(send, recv, root, rank, nranks, stream):
    """Everything fcclBroadcast needs, checked in Python first: (send or None, recv, stream handle). recv None: in
    place (send is the buffer). send None: allowed on ranks other than root, which do not read it."""
    _check_nranks(nranks)
    if not isinstance(root, int) or isinstance(root, bool):
        raise TypeError(f"root must be an int, not {type(root).__name__}")
    if not 0 <= root < nranks:
        raise ValueError(f"root {root} is not a rank of this communicator (0..{nranks - 1})")
    if send is None:
        if rank == root:
            raise ValueError(f"send is None on the root (rank {root}): the root sends it")
        if recv is None:
            raise ValueError("send and recv are both None: recv receives the message")
        recv_buffer = _as_buffer(recv, "recv")
        if recv_buffer.readonly:
            raise ValueError("recv is read-only (its __cuda_array_interface__ says so)")
        return None, recv_buffer, _stream_of(stream, recv_buffer)
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    return send_buffer, recv_buffer, _stream_of(stream, send_buffer, recv_buffer)


def _check_root(root, nranks):
    if not isinstance(root, int) or isinstance(root, bool):
        raise TypeError(f"root must be an int, not {type(root).__name__}")
    if not 0 <= root < nranks:
        raise ValueError(f"root {root} is not a rank of this communicator (0..{nranks - 1})")


def _writable(buffer, name):
    if buffer.readonly:
        raise ValueError(f"{name} is read-only (its __cuda_array_interface__ says so)")
    return buffer


def _reduce_arguments(send, recv, op, root, rank, nranks, stream):
    """Everything fcclReduce needs, checked in Python first: (send, recv or None, op, stream handle). recv is the
    root's: None there means in place (send receives the result); elsewhere it is not used and may be None."""
    _check_nranks(nranks)
    _check_root(root, nranks)
    send_buffer = _as_buffer(send, "send")
    if recv is None or recv is send:
        recv_buffer = _writable(send_buffer, "send (in place)") if rank == root else None
    else:
        send_buffer, recv_buffer = _pair(send, recv)
        if send_buffer.count != recv_buffer.count:
            raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    return send_buffer, recv_buffer, _op_of(op), _stream_of(stream, send_buffer, recv_buffer)


def _gather_arguments(send, recv, root, rank, nranks, stream):
    """Everything fcclGather needs, checked in Python first: (send, recv or None, stream handle). The root's recv
    holds nranks x send's elements (in place when send is the root's block of it); elsewhere recv is not used and
    may be None."""
    _check_nranks(nranks)
    _check_root(root, nranks)
    if recv is None:
        if rank == root:
            raise ValueError(f"recv is required on the root (rank {root}): it receives every rank's send")
        send_buffer = _as_buffer(send, "send")
        return send_buffer, None, _stream_of(stream, send_buffer)
    send_buffer, recv_buffer = _pair(send, recv)
    if recv_buffer.count != nranks * send_buffer.count:
        raise ValueError(f"recv has {recv_buffer.count} elements; a gather of {send_buffer.count} over {nranks} "
                         f"ranks needs {nranks * send_buffer.count}")
    return send_buffer, recv_buffer, _stream_of(stream, send_buffer, recv_buffer)


def _scatter_arguments(send, recv, root, rank, nranks, stream):
    """Everything fcclScatter needs, checked in Python first: (send or None, recv, stream handle). The root's send
    holds nranks x recv's elements (in place when recv is the root's block of it); elsewhere send is not read and
    may be None."""
    _check_nranks(nranks)
    _check_root(root, nranks)
    if recv is None:
        raise ValueError("recv is required: it receives this rank's block of the root's send")
    if send is None:
        if rank == root:
            raise ValueError(f"send is None on the root (rank {root}): the root sends it")
        recv_buffer = _writable(_as_buffer(recv, "recv"), "recv")
        return None, recv_buffer, _stream_of(stream, recv_buffer)
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != nranks * recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements; a scatter into {recv_buffer.count} over {nranks} "
                         f"ranks needs {nranks * recv_buffer.count}")
    return send_buffer, recv_buffer, _stream_of(stream, send_buffer, recv_buffer)


def _peer_arguments(buf, peer, nranks, stream, what):
    """Everything fcclSend or fcclRecv needs, checked in Python first: (buffer, stream handle)."""
    _check_nranks(nranks)
    if not isinstance(peer, int) or isinstance(peer, bool):
        raise TypeError(f"peer must be an int, not {type(peer).__name__}")
    if not 0 <= peer < nranks:
        raise ValueError(f"peer {peer} is not a rank of this communicator (0..{nranks - 1})")
    buffer = _as_buffer(buf, what)
    if what == "recv" and buffer.readonly:
        raise ValueError("recv is read-only (its __cuda_array_interface__ says so)")
    return buffer, _stream_of(stream, buffer)


def _all_to_all_arguments(send, recv, nranks, stream):
    """Everything fcclAllToAll needs: (send, recv, count per peer, stream handle). send and recv each hold nranks
    blocks of the same size and must be separate buffers."""
    _check_nranks(nranks)
    if recv is None or recv is send:
        raise ValueError("all_to_all needs separate send and recv buffers")
    send_buffer, recv_buffer = _pair(send, recv)
    if send_buffer.count != recv_buffer.count:
        raise ValueError(f"send has {send_buffer.count} elements but recv has {recv_buffer.count}")
    if send_buffer.count % nranks != 0:
        raise ValueError(f"{send_buffer.count} elements do not split into {nranks} equal blocks")
    return send_buffer, recv_buffer, send_buffer.count // nranks, _stream_of(stream, send_buffer, recv_buffer)


def _exclude_list(exclude):
    """exclude as a list of ints (a single rank, or an iterable of them)."""
    if isinstance(exclude, int) and not isinstance(exclude, bool):
        return [exclude]
    try:
        ranks = list(exclude)
    except TypeError:
        raise TypeError(f"exclude must be a rank or ranks, not {type(exclude).__name__}") from None
    for rank in ranks:
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise TypeError(f"exclude holds {rank!r}, not a rank (an int)")
    return ranks


_NORM_TYPES = (DataType.float16, DataType.bfloat16, DataType.float32)


def _add_rms_norm_arguments(input, residual, weight, output, hidden, eps, scale, scale_mode, stream):
    """Everything fcclAllReduceAddRMSNorm needs, checked in Python first: (input, residual or None, weight or None,
    output, tokens, hidden, eps, scale mode, scale or None, stream handle). hidden None: the last dimension of a
    torch tensor or __cuda_array_interface__ input."""
    input_buffer = _as_buffer(input, "input")
    if input_buffer.dtype not in _NORM_TYPES:
        raise TypeError(f"input is {input_buffer.dtype.name}; the fused norm takes float16, bfloat16 or float32")
    if hidden is None:
        shape = tuple(input.shape) if _is_torch_tensor(input) else tuple(
            getattr(input, "__cuda_array_interface__", {}).get("shape", ()))
        if not shape:
            raise ValueError("hidden is required when input has no shape (an explicit (pointer, count, dtype))")
        hidden = shape[-1]
    if not isinstance(hidden, int) or isinstance(hidden, bool) or hidden < 1:
        raise ValueError(f"hidden must be a positive int, got {hidden!r}")
    if input_buffer.count % hidden != 0:
        raise ValueError(f"input has {input_buffer.count} elements, not a whole number of rows of {hidden}")
    tokens = input_buffer.count // hidden
    eps = float(eps)
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be finite and >= 0, got {eps!r}")

    def same_type(obj, name, count):
        if obj is None:
            return None
        buffer = _as_buffer(obj, name)
        if buffer.dtype != input_buffer.dtype:
            raise ValueError(f"{name} is {buffer.dtype.name} but input is {input_buffer.dtype.name}")
        if buffer.count != count:
            raise ValueError(f"{name} has {buffer.count} elements, {count} expected")
        return buffer

    residual_buffer = same_type(residual, "residual", input_buffer.count)
    weight_buffer = same_type(weight, "weight", hidden)
    if residual_buffer is not None and residual_buffer.readonly:
        raise ValueError("residual is read-only, but r' is written into it")
    if output is None:
        raise ValueError("output is required")
    output_buffer = _as_buffer(output, "output")
    if output_buffer.readonly:
        raise ValueError("output is read-only (its __cuda_array_interface__ says so)")
    if output_buffer.count != input_buffer.count:
        raise ValueError(f"output has {output_buffer.count} elements, input {input_buffer.count}")
    fp8 = output_buffer.dtype == DataType.float8e4m3
    if not fp8 and output_buffer.dtype != input_buffer.dtype:
        raise ValueError(f"output is {output_buffer.dtype.name}: input's type ({input_buffer.dtype.name}) or "
                         f"float8e4m3")
    mode = _enum_member(ScaleMode, scale_mode if scale_mode is not None else "none", "scale mode")
    if mode is None:
        raise TypeError(f"scale_mode must be a name or fccl.ScaleMode, not {type(scale_mode).__name__}")
    if fp8 != (mode != ScaleMode.none):
        raise ValueError(f"scale_mode {mode.name} with a {output_buffer.dtype.name} output: an FP8 output takes "
                         f"'static' or 'dynamic', any other 'none'")
    scale_buffer = None
    if mode == ScaleMode.none:
        if scale is not None:
            raise ValueError("scale is given without an FP8 output")
    else:
        if scale is None:
            raise ValueError(f"scale is required with scale_mode {mode.name}")
        scale_buffer = _as_buffer(scale, "scale")
        if scale_buffer.dtype != DataType.float32:
            raise ValueError(f"scale is {scale_buffer.dtype.name}, float32 expected")
        want = 1 if mode == ScaleMode.static else tokens
        if scale_buffer.count != want:
            raise ValueError(f"scale has {scale_buffer.count} elements, {want} expected ({mode.name})")
        if mode == ScaleMode.dynamic and scale_buffer.readonly:
            raise ValueError("scale is read-only but the dynamic scales are written into it")
    stream_handle = _stream_of(stream, input_buffer, output_buffer)
    return (input_buffer, residual_buffer, weight_buffer, output_buffer, tokens, hidden, eps, mode, scale_buffer,
            stream_handle)
