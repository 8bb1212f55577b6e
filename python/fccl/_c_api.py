# SPDX-License-Identifier: Apache-2.0
"""include/fccl.h as ctypes sees it: its sizes and magic numbers, its structs and callback types, and the prototype
of every function this package calls (declared on the library when it is loaded)."""
import ctypes

UNIQUE_ID_BYTES = 128
CONFIG_MAGIC = 0xFCC1C0F1
_CONFIG_UNDEF_INT = -1
SPLIT_NOCOLOR = -1  # FCCL_SPLIT_NOCOLOR


class _UniqueIdStruct(ctypes.Structure):
    # c_ubyte rather than c_char: a c_char array field reads back cut at the first NUL byte.
    _fields_ = [("internal", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


class _ConfigStruct(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("timeoutMs", ctypes.c_int),
        ("commName", ctypes.c_char_p),
        ("allowSharedDevice", ctypes.c_int),
        ("splitShare", ctypes.c_int),
        ("minCTAs", ctypes.c_int),
        ("maxCTAs", ctypes.c_int),
    ]


_ALLGATHER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
_BARRIER_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _BootstrapCallbacksStruct(ctypes.Structure):
    _fields_ = [("userContext", ctypes.c_void_p), ("allgather", _ALLGATHER_FN), ("barrier", _BARRIER_FN)]


_MEM_STATS_FIELDS = ("openMappings", "mappingReferences", "bytesMapped", "totalOpens", "totalCloses",
                     "commRegistrations", "commDeviceBytes", "commGraphRegistrations", "arenaBytes", "arenaChunks",
                     "commPeerBytes")


class _MemStatsStruct(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t)] + [(name, ctypes.c_uint64) for name in _MEM_STATS_FIELDS]


MOE_CONFIG_MAGIC = 0xFCC1E0E1  # FCCL_MOE_CONFIG_MAGIC


class _MoeConfigStruct(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("numExperts", ctypes.c_int),
        ("topk", ctypes.c_int),
        ("hidden", ctypes.c_size_t),
        ("maxTokensPerRank", ctypes.c_size_t),
        ("recvLayout", ctypes.c_int),
        ("expertAlignment", ctypes.c_int),
        ("blocks", ctypes.c_int),
    ]


class _MoeRecvStruct(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("x", "scales", "weights", "sourceTokens", "expertCounts",
                                                     "expertOffsets")]


_c_int_p = ctypes.POINTER(ctypes.c_int)
_comm_t = ctypes.c_void_p
_result_t = ctypes.c_int
# name: (restype, argtypes)
_PROTOTYPES = {
    "fcclGetVersion": (_result_t, [_c_int_p]),
    "fcclGetErrorString": (ctypes.c_char_p, [_result_t]),
    "fcclGetLastError": (ctypes.c_char_p, [_comm_t]),
    "fcclGetUniqueId": (_result_t, [ctypes.POINTER(_UniqueIdStruct)]),
    "fcclCommInitRankConfig": (_result_t, [ctypes.POINTER(_comm_t), ctypes.c_int, _UniqueIdStruct, ctypes.c_int,
                                           ctypes.POINTER(_ConfigStruct)]),
    "fcclCommInitExternal": (_result_t, [ctypes.POINTER(_comm_t), ctypes.c_int, ctypes.c_int,
                                         ctypes.POINTER(_BootstrapCallbacksStruct), ctypes.POINTER(_ConfigStruct)]),
    "fcclCommInitFromNccl": (_result_t, [ctypes.POINTER(_comm_t), ctypes.c_void_p, ctypes.POINTER(_ConfigStruct)]),
    "fcclCommDestroy": (_result_t, [_comm_t]),
    "fcclCommAbort": (_result_t, [_comm_t]),
    "fcclCommGetAsyncError": (_result_t, [_comm_t, _c_int_p]),
    "fcclCommCount": (_result_t, [_comm_t, _c_int_p]),
    "fcclCommCuDevice": (_result_t, [_comm_t, _c_int_p]),
    "fcclCommUserRank": (_result_t, [_comm_t, _c_int_p]),
    "fcclAllReduce": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  _comm_t, ctypes.c_void_p]),
    "fcclAllGather": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, _comm_t,
                                  ctypes.c_void_p]),
    "fcclReduceScatter": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                      _comm_t, ctypes.c_void_p]),
    "fcclBroadcast": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  _comm_t, ctypes.c_void_p]),
    "fcclReduce": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclBcast": (_result_t, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _comm_t,
                              ctypes.c_void_p]),
    "fcclGather": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                               _comm_t, ctypes.c_void_p]),
    "fcclScatter": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                _comm_t, ctypes.c_void_p]),
    "fcclRedOpCreatePreMulSum": (_result_t, [_c_int_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, _comm_t]),
    "fcclRedOpDestroy": (_result_t, [ctypes.c_int, _comm_t]),
    "fcclAllGatherV": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int,
                                   _comm_t, ctypes.c_void_p]),
    "fcclReduceScatterV": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                                       ctypes.c_int, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclAllGatherVDevice": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                         ctypes.c_size_t, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclReduceScatterVDevice": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                             ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclAllReduceAddRMSNorm": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                            ctypes.c_size_t, ctypes.c_size_t, ctypes.c_float, ctypes.c_int,
                                            ctypes.c_int, ctypes.c_int, ctypes.c_void_p, _comm_t, ctypes.c_void_p]),
    "fcclBarrier": (_result_t, [_comm_t, ctypes.c_void_p]),
    "fcclCommRegister": (_result_t, [_comm_t, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]),
    "fcclCommDeregister": (_result_t, [_comm_t, ctypes.c_void_p]),
    "fcclCommGetMemStats": (_result_t, [_comm_t, ctypes.POINTER(_MemStatsStruct)]),
    "fcclCommGetPath": (_result_t, [_comm_t, _c_int_p, ctypes.POINTER(ctypes.c_char_p)]),
    "fcclGetPathName": (ctypes.c_char_p, [ctypes.c_int]),
    "fcclSend": (_result_t, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclRecv": (_result_t, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, _comm_t, ctypes.c_void_p]),
    "fcclAllToAll": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, _comm_t,
                                 ctypes.c_void_p]),
    "fcclGroupStart": (_result_t, []),
    "fcclCommShrink": (_result_t, [_comm_t, _c_int_p, ctypes.c_int, ctypes.POINTER(_comm_t),
                                   ctypes.POINTER(_ConfigStruct), ctypes.c_int]),
    "fcclGroupEnd": (_result_t, []),
    "fcclCommSplit": (_result_t, [_comm_t, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_comm_t),
                                  ctypes.POINTER(_ConfigStruct)]),
    "fcclCommFinalize": (_result_t, [_comm_t]),
    "fcclMoeLayoutCreate": (_result_t, [_comm_t, ctypes.POINTER(_MoeConfigStruct), ctypes.POINTER(ctypes.c_void_p)]),
    "fcclMoeLayoutDestroy": (_result_t, [ctypes.c_void_p]),
    "fcclMoeLayoutRecvRows": (_result_t, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]),
    "fcclMoeDispatch": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_int, ctypes.POINTER(_MoeRecvStruct), ctypes.c_int,
                                    ctypes.c_void_p, ctypes.c_void_p]),
    "fcclMoeCombine": (_result_t, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                   ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]),
}
