"""UVM-style verification of the emitted Verilog: pyuvm on cocotb, driven through cocotbext-axi.

``verif.runner`` builds the system Verilog under Verilator for cocotb and runs
the pyuvm tests of ``verif.tests``; ``python -m gen uvm`` calls it. See docs/uvm.md.
"""
