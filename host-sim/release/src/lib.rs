//! release (being written)
