//! panel (being written)
