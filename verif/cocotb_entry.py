"""The one cocotb test the simulator runs: it starts the pyuvm test the configuration names."""
import cocotb

from verif.tests import run


@cocotb.test()
async def uvm(dut):
    await run(dut)
