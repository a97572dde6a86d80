//! plugin (being written)
