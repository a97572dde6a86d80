//! host-sim (being written)
