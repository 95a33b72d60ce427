"""Banked on-chip SRAM with byte enables and stream ports (:class:`BankedMemory`)."""
from __future__ import annotations

from amaranth.hdl import Cat, ClockSignal, Instance, MemoryData, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In
from amaranth.utils import exact_log2

from ..lib import ParkedRoundRobin, RegisterSlice, check_bus_width, index_bits
from .ports import BYTE_BITS, ReadPortSignature, WritePortSignature, lanes, word_addr_bits

__all__ = ["BankedMemory"]


class _Answer(data.StructLayout):
    """A read response in a :meth:`BankedMemory._logical_reads` slice: the
    ``word`` and a one-bit ``mark`` the slice treats as urgent, so that its
    ``o.valid`` reads a copy of the read pointer of its own (a few loads)
    rather than the one selecting every bit of the word: a reader decides
    with ``rsp.valid``."""
    def __init__(self, data_width):
        super().__init__({"word": data_width, "mark": 1})


class BankedMemory(wiring.Component):
    """Word-interleaved banked SRAM with byte-enable writes.

    Parameters
    ----------
    data_width : int
        Word (bus) width in bits: one of 32, 64, 128, 256.
    size : int
        Size in bytes; a positive multiple of ``banks * data_width // 8``.
    banks : int
        Number of banks, a power of two.
    read_ports : int
        Number of read ports (at least 1).
    write_ports : int
        Number of write ports (at least 1). When two write ports write the
        same byte in the same cycle, the higher-numbered port wins.
    init : bytes-like, optional
        Initial contents, little-endian; shorter than ``size`` is zero-padded.
    shared_write : bool
        Serve the write ports through one physical write port per memory,
        granted round-robin from a register (:class:`~hw.lib.ParkedRoundRobin`:
        a port's ``ready`` is high while it holds the grant, whether it writes
        or not): what an FPGA's block RAM, with one write port, needs. With
        ``False`` every write port is its own physical port and always ready.
    shared_read : bool
        Serve the read ports through one physical read port per memory,
        granted round-robin from a register among the requests (a port's
        ``req.ready`` is low while another holds the grant; a response goes
        to the port that asked and is held there until taken, as on a port
        of its own). On an FPGA each
        physical read port is a copy of every block RAM; with ``False`` each
        read port is its own.
    registered : bool
        Register every path between the block RAMs and the fabric, for an
        FPGA whose block RAMs spread a word across the chip: each read
        port's requests and responses pass a :class:`~hw.lib.RegisterSlice`
        (with ``shared_read``, one slice after the arbiter takes the granted
        requests; a read answers three cycles after its request, at full
        rate), and
        the physical write port's request a register (a write takes effect
        at the edge after the one that accepts it, so a read accepted after
        a write still sees it).
    macro : bool
        Elaborate each bank as an instance of the SRAM macro ``reshard_sram``
        (:data:`SRAM_VERILOG` is its simulation model) instead of an Amaranth
        ``Memory``: how the emitted Verilog keeps megabyte memories out of the
        netlist, as an ASIC flow would. Zero-initialised; not for the Amaranth
        simulator. Same timing: reads registered one cycle, not transparent.

    Interface attributes
    --------------------
    read : ``In(ReadPortSignature(addr_width, data_width)).array(read_ports)``
        Read ports: ``read[i].req`` takes word addresses, ``read[i].rsp``
        returns the words one cycle later (held under back-pressure).
    write : ``In(WritePortSignature(addr_width, data_width)).array(write_ports)``
        Write ports: always ready, or one at a time with ``shared_write``.
    """

    def __init__(self, *, data_width=32, size=4096, banks=1, read_ports=1, write_ports=1,
                 init=b"", shared_write=False, shared_read=False, registered=False,
                 macro=False):
        check_bus_width(data_width)
        word = lanes(data_width)
        if not isinstance(banks, int) or banks < 1 or banks & (banks - 1):
            raise ValueError(f"Bank count must be a positive power of two, not {banks!r}")
        if not isinstance(size, int) or size <= 0 or size % (banks * word):
            raise ValueError(f"Memory size must be a positive multiple of {banks * word} bytes "
                             f"({banks} banks of {word}-byte words), not {size!r}")
        if not isinstance(read_ports, int) or read_ports < 1:
            raise ValueError(f"Read port count must be at least 1, not {read_ports!r}")
        if not isinstance(write_ports, int) or write_ports < 1:
            raise ValueError(f"Write port count must be at least 1, not {write_ports!r}")
        init = bytes(init)
        if macro and any(init):
            raise ValueError("A macro memory starts zeroed; it cannot take initial contents")
        self._macro = bool(macro)
        self._shared_write = bool(shared_write)
        self._shared_read = bool(shared_read)
        self._registered = bool(registered)
        if len(init) > size:
            raise ValueError(f"Initial contents of {len(init)} bytes exceed the memory size "
                             f"of {size} bytes")
        self._data_width = data_width
        self._size = size
        self._banks = banks
        self._read_ports = read_ports
        self._write_ports = write_ports
        self._words = size // word
        self._addr_width = word_addr_bits(size, data_width)

        depth = self._words // banks
        self._depth = depth
        if self._macro:
            self._bank_data = []
        else:
            init = init + bytes(size - len(init))
            words = [int.from_bytes(init[i * word:(i + 1) * word], "little")
                     for i in range(self._words)]
            self._bank_data = [
                MemoryData(shape=data_width, depth=depth, init=words[b::banks])
                for b in range(banks)
            ]
        super().__init__({
            "read": In(ReadPortSignature(self._addr_width, data_width)).array(read_ports),
            "write": In(WritePortSignature(self._addr_width, data_width)).array(write_ports),
        })

    data_width = property(lambda self: self._data_width, doc="Word width in bits.")
    size = property(lambda self: self._size, doc="Size in bytes.")
    banks = property(lambda self: self._banks, doc="Number of banks.")
    read_ports = property(lambda self: self._read_ports, doc="Number of read ports.")
    write_ports = property(lambda self: self._write_ports, doc="Number of write ports.")
    shared_read = property(lambda self: self._shared_read,
                           doc="The read ports share one physical read port.")
    shared_write = property(lambda self: self._shared_write,
                            doc="Write ports share one physical port.")
    registered = property(lambda self: self._registered,
                          doc="Reads and writes pass registers (see above).")
    read_latency = property(lambda self: 3 if self._registered else 1,
                            doc="Cycles from a read's request to its response.")
    addr_width = property(lambda self: self._addr_width, doc="Word address width.")
    words = property(lambda self: self._words, doc="Size in words.")

    @property
    def bank_data(self):
        """The banks' :class:`MemoryData` (for simulation access)."""
        return tuple(self._bank_data)

    def _locate(self, word_addr):
        return self._bank_data[word_addr % self._banks], word_addr // self._banks

    # ---- simulation helpers (testbench context) ----
    def sim_read(self, ctx, addr, length):
        """Read ``length`` bytes at byte address ``addr`` in a testbench ``ctx``."""
        word = lanes(self._data_width)
        out = bytearray()
        for w in range(addr // word, (addr + length + word - 1) // word):
            mem, row = self._locate(w)
            out += int(ctx.get(mem[row])).to_bytes(word, "little")
        off = addr % word
        return bytes(out[off:off + length])

    def sim_write(self, ctx, addr, payload):
        """Write ``payload`` bytes at byte address ``addr`` in a testbench ``ctx``."""
        word = lanes(self._data_width)
        payload = bytes(payload)
        for w in range(addr // word, (addr + len(payload) + word - 1) // word):
            mem, row = self._locate(w)
            cur = bytearray(int(ctx.get(mem[row])).to_bytes(word, "little"))
            for lane in range(word):
                i = w * word + lane - addr
                if 0 <= i < len(payload):
                    cur[lane] = payload[i]
            ctx.set(mem[row], int.from_bytes(cur, "little"))

    @staticmethod
    def _read_control(m, p, port, bank_bits):
        """Handshake of read port p: (bank select of the word in flight,
        accept). The block RAMs read at every accepting edge, requested or
        not (their read enable is ``accept``, not ``accept & req.valid``): a
        read nobody asked for leaves ``rsp.valid`` low, so its word is never
        seen, and the enable, which drives every block RAM, does not wait on
        the request's valid (with ``shared_read`` a multiplexer behind the
        arbiter's grant)."""
        rsp_valid = Signal(name=f"rsp_valid{p}")
        sel = Signal(index_bits(1 << bank_bits), name=f"rsp_bank{p}")
        accept = Signal(name=f"accept{p}")
        m.d.comb += [accept.eq(~rsp_valid | port.rsp.ready), port.req.ready.eq(accept),
                     port.rsp.valid.eq(rsp_valid)]
        with m.If(accept):
            m.d.sync += rsp_valid.eq(port.req.valid)
            if bank_bits:
                m.d.sync += sel.eq(port.req.p[:bank_bits])
        return sel, accept

    @staticmethod
    def _select_bank(m, port, sel, words, bank_bits):
        if bank_bits:
            with m.Switch(sel):
                for b, d in enumerate(words):
                    with m.Case(b):
                        m.d.comb += port.rsp.p.eq(d)
        else:
            m.d.comb += port.rsp.p.eq(words[0])

    def _logical_reads(self, m):
        """The read ports as the banks' side sees them: each port itself, or
        (``registered``) the far side of a request and a response slice. The
        response slices are two-register queues (``late_ready``): a reader's
        ``rsp.ready``, often late, reaches their pointers, not the enables of
        every data flip-flop, and ``rsp.valid`` comes from a pointer of its
        own (see :class:`_Answer`). With ``shared_read`` (more than one port) the
        requests are registered after the arbiter instead (see
        :meth:`_physical_reads`), so here they pass straight through."""
        ports = [self.read[p] for p in range(self._read_ports)]
        if not self._registered:
            return ports
        shared = self._shared_read and len(ports) > 1
        inner = []
        sig = ReadPortSignature(self._addr_width, self._data_width)
        for p, port in enumerate(ports):
            far = sig.flip().create(path=(f"read{p}_inner",))
            if shared:
                wiring.connect(m, wiring.flipped(port.req), far.req)
            else:
                m.submodules[f"read{p}_req"] = req = RegisterSlice(self._addr_width)
                wiring.connect(m, wiring.flipped(port.req), req.i)
                m.d.comb += [far.req.valid.eq(req.o.valid), far.req.p.eq(req.o.p),
                             req.o.ready.eq(far.req.ready)]
            m.submodules[f"read{p}_rsp"] = rsp = RegisterSlice(_Answer(self._data_width),
                                                               late_ready=True,
                                                               urgent=("mark",))
            m.d.comb += [rsp.i.valid.eq(far.rsp.valid), rsp.i.p.word.eq(far.rsp.p),
                         rsp.i.p.mark.eq(1), far.rsp.ready.eq(rsp.i.ready),
                         port.rsp.valid.eq(rsp.o.valid), port.rsp.p.eq(rsp.o.p.word),
                         rsp.o.ready.eq(port.rsp.ready)]
            inner.append(far)
        return inner

    def _physical_reads(self, m):
        """The read ports the banks serve: each port as it is, or
        (``shared_read``) one port whose requests a parked round-robin
        arbiter takes from the ports (its grant a register, held while the
        granted request waits) and whose responses go back to the port that
        asked. With ``registered`` too, the granted request (its address and
        the asking port) enters one register slice before the block RAMs, in
        place of a slice per port: the same three cycles, and the block RAMs'
        address (and the read-first logic synthesis builds around it, which
        compares it with the write address) comes one multiplexer from
        flip-flops, not through the multiplexers behind the grant. Each
        port's ``req.ready`` is then a flip-flop of its own (its next grant
        and the slice's next room), and a request waits at its port until
        granted."""
        ports = self._logical_reads(m)
        if not self._shared_read or len(ports) == 1:
            return ports
        n = len(ports)
        phys = ReadPortSignature(self._addr_width, self._data_width).flip().create(
            path=("shared_r",))
        asked = data.StructLayout({"addr": self._addr_width, "port": range(max(2, n))})
        requests = Cat(*[port.req.valid for port in ports])
        room = Signal(init=1, name="shared_r_room")       # the next stage takes a request
        hold = Signal(name="shared_r_hold")
        m.submodules.read_arbiter = rr = ParkedRoundRobin(n)
        m.d.comb += [rr.requests.eq(requests), rr.hold.eq(hold)]
        grant, grant_next = rr.grant, rr.grant_next
        granted = Signal(asked, name="shared_r_granted")
        granted_valid = Signal(name="shared_r_granted_valid")
        for p, port in enumerate(ports):
            with m.If(grant[p]):
                m.d.comb += [granted_valid.eq(port.req.valid), granted.addr.eq(port.req.p),
                             granted.port.eq(p)]
        m.d.comb += hold.eq(granted_valid & ~room)
        if self._registered:
            asker = self._shared_request(m, phys, asked, granted, granted_valid, room,
                                         grant_next, ports)
        else:
            m.d.comb += [phys.req.valid.eq(granted_valid), phys.req.p.eq(granted.addr),
                         room.eq(phys.req.ready)]
            m.d.comb += [port.req.ready.eq(grant[p] & room) for p, port in enumerate(ports)]
            asker = granted.port
        owner = Signal(range(max(2, n)), name="shared_r_owner")
        for p, port in enumerate(ports):
            with m.If(owner == p):
                m.d.comb += phys.rsp.ready.eq(port.rsp.ready)
            m.d.comb += [port.rsp.valid.eq(phys.rsp.valid & (owner == p)),
                         port.rsp.p.eq(phys.rsp.p)]
        # the owner follows every accepting edge, request or not: without
        # one, no response is valid, so whom it would go to does not matter
        with m.If(phys.req.ready):
            m.d.sync += owner.eq(asker)
        return [phys]

    @staticmethod
    def _shared_request(m, phys, asked, granted, granted_valid, room, grant_next, ports):
        """The granted request through one register slice to ``phys``: a
        two-register queue whose entries load while free, so a port's late
        request valid reaches its pointers only, not the enables of every
        address flip-flop; the address reads a copy of the read pointer of its
        own (it drives every block RAM). ``room`` (the slice is not full) and
        each port's ``req.ready`` (= its grant and ``room``) are flip-flops
        computed a cycle early from a count of the slice's entries. Returns
        the port that asked for the request ``phys`` offers."""
        m.submodules.read_shared_req = req = RegisterSlice(asked, late_ready=True,
                                                           urgent=("addr",))
        m.d.comb += [req.i.valid.eq(granted_valid), req.i.p.eq(granted),
                     phys.req.valid.eq(req.o.valid), phys.req.p.eq(req.o.p.addr),
                     req.o.ready.eq(phys.req.ready)]
        held = Signal(range(3), name="shared_r_held")     # the slice's entries
        held_next = Signal.like(held)
        m.d.comb += held_next.eq(held + (granted_valid & room) - (req.o.valid & req.o.ready))
        m.d.sync += [held.eq(held_next), room.eq(held_next != 2)]
        for p, port in enumerate(ports):
            ready = Signal(init=int(p == 0), name=f"shared_r_ready{p}")
            m.d.sync += ready.eq(grant_next[p] & (held_next != 2))
            m.d.comb += port.req.ready.eq(ready)
        return req.o.p.port

    def _physical_writes(self, m):
        """The write requests that reach the memory: each port as it is, or
        (``shared_write``) the one port a parked round-robin arbiter grants
        (its grant a register, so no writer's ready waits on another's valid,
        and the block RAM's inputs are a multiplexer from flip-flops)."""
        ports = [self.write[p] for p in range(self._write_ports)]
        if not self._shared_write or len(ports) == 1:
            for port in ports:
                m.d.comb += port.ready.eq(1)
            return self._registered_writes(m, [(port.valid, port.p) for port in ports])
        m.submodules.write_arbiter = rr = ParkedRoundRobin(len(ports))
        valid = Signal(name="shared_w_valid")
        payload = Signal.like(ports[0].p, name="shared_w")
        m.d.comb += rr.requests.eq(Cat(*[port.valid for port in ports]))
        for p, port in enumerate(ports):
            m.d.comb += port.ready.eq(rr.grant[p])
            with m.If(rr.grant[p]):
                m.d.comb += [valid.eq(port.valid), payload.eq(port.p)]
        return self._registered_writes(m, [(valid, payload)])

    def _registered_writes(self, m, writes):
        """The writes as they are, or (``registered``) a cycle later from registers."""
        if not self._registered:
            return writes
        out = []
        for p, (valid, payload) in enumerate(writes):
            r_valid = Signal(name=f"w{p}_valid_r")
            r_payload = Signal.like(payload, name=f"w{p}_r")
            m.d.sync += [r_valid.eq(valid), r_payload.eq(payload)]
            out.append((r_valid, r_payload))
        return out

    def _elaborate_macro(self, m, bank_bits):
        """Each bank an instance of ``reshard_sram`` (see :data:`SRAM_VERILOG`)."""
        W, B = self._data_width, lanes(self._data_width)
        abits = index_bits(self._depth)
        rsp = []
        for p, port in enumerate(self._physical_reads(m)):
            sel, accept = self._read_control(m, p, port, bank_bits)
            rsp.append((port, sel, accept))
        bank_rdata = []
        writes = self._physical_writes(m)
        for b in range(self._banks):
            we, waddr, wdata, re, raddr = [], [], [], [], []
            for p, (valid, req) in enumerate(writes):
                hit = (req.addr[:bank_bits] == b) if bank_bits else 1
                en = Signal(B, name=f"b{b}_we{p}")
                m.d.comb += en.eq(Mux(valid & hit, req.be, 0))
                we.append(en)
                waddr.append(req.addr[bank_bits:][:abits])
                wdata.append(req.data)
            for p, (port, _sel, accept) in enumerate(rsp):
                re.append(accept)                 # see _read_control
                raddr.append(port.req.p[bank_bits:][:abits])
            rdata = Signal(W * len(rsp), name=f"b{b}_rdata")
            m.submodules[f"bank{b}"] = Instance(
                "reshard_sram", p_WIDTH=W, p_DEPTH=self._depth, p_ABITS=abits,
                p_WPORTS=len(writes), p_RPORTS=len(rsp),
                i_clk=ClockSignal("sync"), i_we=Cat(*we), i_waddr=Cat(*waddr), i_wdata=Cat(*wdata),
                i_re=Cat(*re), i_raddr=Cat(*raddr), o_rdata=rdata)
            bank_rdata.append(rdata)
        for p, (port, sel, _accept) in enumerate(rsp):
            self._select_bank(m, port, sel, [d[p * W:(p + 1) * W] for d in bank_rdata], bank_bits)
        return m

    def elaborate(self, platform):
        m = Module()
        bank_bits = exact_log2(self._banks)
        if self._macro:
            return self._elaborate_macro(m, bank_bits)

        mems = []
        for b, bdata in enumerate(self._bank_data):
            mem = Memory(data=bdata)
            m.submodules[f"bank{b}"] = mem
            mems.append(mem)

        for valid, req in self._physical_writes(m):
            for b, mem in enumerate(mems):
                wp = mem.write_port(granularity=BYTE_BITS)
                bank_hit = (req.addr[:bank_bits] == b) if bank_bits else 1
                m.d.comb += [
                    wp.addr.eq(req.addr[bank_bits:]),
                    wp.data.eq(req.data),
                    wp.en.eq(Mux(valid & bank_hit, req.be, 0)),
                ]

        for p, port in enumerate(self._physical_reads(m)):
            sel, accept = self._read_control(m, p, port, bank_bits)
            rdata = []
            for b, mem in enumerate(mems):
                rp = mem.read_port(transparent_for=())
                m.d.comb += [
                    rp.addr.eq(port.req.p[bank_bits:]),
                    rp.en.eq(accept),                 # see _read_control
                ]
                rdata.append(rp.data)
            self._select_bank(m, port, sel, rdata, bank_bits)
        return m
