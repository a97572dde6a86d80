//! Host capabilities, one module each (what the manifest declares, how the
//! operator's state becomes a per-invocation grant, the WIT host
//! implementation, and the one function that enforces it).

pub mod context;
pub mod documents;
pub mod http;
