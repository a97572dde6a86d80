//! umami-fake (being written)
