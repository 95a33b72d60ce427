// Test top for tests/test_sv.py: uses the generated package and sequence item the
// way a testbench would, so that elaboration checks their types and constraints.
module reshard_sv_top;
  import reshard_pkg::*;
  import reshard_seq_pkg::*;

  word_t prog [0:DEFAULT_IMEM_WORDS-1];
  reg_status_t status;
  insn_u insn;

  initial begin
    reshard_insn_item item, copy;
    item = reshard_insn_item::type_id::create("item");
    item.channels = 2;
    if (!item.randomize() with { op == OP_COPY_ADD_BF16; }) $fatal(1, "randomize failed");
    copy = new("copy");
    copy.do_copy(item);
    if (!copy.do_compare(item, null)) $fatal(1, "copy differs");
    $readmemh("program.hex", prog);
    if (!item.decode(prog[0])) $fatal(1, "word 0 is not a legal instruction");
    if (item.encode() !== prog[0]) $fatal(1, "encode(decode(w)) != w");
    $display("%s", item.convert2string());
    insn.raw = prog[1];
    if (insn.as_copy.opcode == OP_COPY && insn.as_copy.rows != 0) $display("copy of %0d rows", insn.as_copy.rows);
    status = reg_status_t'(32'h0000_1004);
    if (status_e'(status.status) == STATUS_ILLEGAL && cause_e'(status.cause) == CAUSE_BAD_OPCODE)
      $display("%s at %h", reg_access(REG_STATUS).name(), REG_STATUS);
  end
endmodule
