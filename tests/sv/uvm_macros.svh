// Stand-in for UVM's uvm_macros.svh (see uvm_pkg_stub.sv): only the macros the
// generated code uses, expanding to the declarations the stub package supports.
`ifndef UVM_MACROS_SVH
`define UVM_MACROS_SVH

`define uvm_object_utils(T) \
  typedef uvm_object_registry #(T, `"T`") type_id; \
  static function type_id get_type(); \
    return null; \
  endfunction \
  virtual function string get_type_name(); \
    return `"T`"; \
  endfunction

// Reporting (docs/sv.md's example uses them): printed, not filtered by verbosity.
`define uvm_info(ID, MSG, VERBOSITY) \
  $display("UVM_INFO [%s] %s", ID, MSG);

`define uvm_error(ID, MSG) \
  $error("UVM_ERROR [%s] %s", ID, MSG);

`define uvm_fatal(ID, MSG) \
  $fatal(1, "UVM_FATAL [%s] %s", ID, MSG);

`endif
