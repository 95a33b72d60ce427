// A minimal stand-in for the UVM library, only so that pyslang can elaborate the
// generated reshard_seq_item.sv without a UVM installation (tests/test_sv.py).
// It declares the few UVM names the generated code and the test top use, with
// the real signatures; none of it does what UVM does. Never compile it with a
// real uvm_pkg: docs/sv.md says what to compile instead.
package uvm_pkg;

  typedef enum int { UVM_NONE = 0, UVM_LOW = 100, UVM_MEDIUM = 200, UVM_HIGH = 300, UVM_FULL = 400,
                     UVM_DEBUG = 500 } uvm_verbosity;

  virtual class uvm_void;
  endclass

  class uvm_comparer;
  endclass

  virtual class uvm_object extends uvm_void;
    protected string m_name;

    function new(string name = "");
      m_name = name;
    endfunction

    virtual function string get_name();
      return m_name;
    endfunction

    virtual function string get_type_name();
      return "uvm_object";
    endfunction

    virtual function string convert2string();
      return "";
    endfunction

    virtual function void do_copy(uvm_object rhs);
    endfunction

    virtual function bit do_compare(uvm_object rhs, uvm_comparer comparer);
      return 1;
    endfunction
  endclass

  // uvm_object_utils(T) names T::type_id; T::type_id::create(name) makes one.
  class uvm_object_registry #(type T = uvm_object, string Tname = "<unknown>");
    static function T create(string name = "");
      T obj = new(name);
      return obj;
    endfunction
  endclass

  virtual class uvm_transaction extends uvm_object;
    function new(string name = "");
      super.new(name);
    endfunction
  endclass

  virtual class uvm_sequence_item extends uvm_transaction;
    function new(string name = "uvm_sequence_item");
      super.new(name);
    endfunction
  endclass

endpackage : uvm_pkg
