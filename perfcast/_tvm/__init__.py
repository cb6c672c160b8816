"""Small shared helpers around TVM 0.27 (imported lazily by the modules that need TVM)."""
