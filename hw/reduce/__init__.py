"""The reduction datapath: floating-point lane adders and reduce-on-write.

* :mod:`.fpadd`: :class:`FpAdd`, a pipelined f32 / bf16 lane adder, built
  from the stages :mod:`.order`, :mod:`.align`, :mod:`.addsub`,
  :mod:`.count`, :mod:`.normalize` and :mod:`.roundpack`;
* :mod:`.rmw`: :class:`ReduceOnWrite`, which turns a stream of write beats
  into read-add-write on a memory's ports, with same-word hazards forwarded
  (:mod:`.inflight` tracks the words inside the adders).

A :class:`~hw.device.Device` puts a :class:`ReduceOnWrite` behind its
network input for the reduce beats of ISA v2's ``COPY_ADD_F32`` /
``COPY_ADD_BF16``.
"""
from .common import FORMATS, FloatFormat
from .fpadd import FpAdd
from .rmw import ReduceOnWrite, ReduceOp, RmwBeat

__all__ = ["FORMATS", "FloatFormat", "FpAdd", "ReduceOnWrite", "ReduceOp", "RmwBeat"]
