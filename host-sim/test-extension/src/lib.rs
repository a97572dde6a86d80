//! test-extension (being written)
