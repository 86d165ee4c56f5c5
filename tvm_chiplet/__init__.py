"""tvm-chiplet: compile DNNs with Apache TVM for chiplet / multi-cluster accelerators."""
