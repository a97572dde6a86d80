//! mail-service (being written)
