//! The managed-analytics console panel: a Leptos app that the console shows
//! in a sandboxed iframe, one per project.
//!
//! - `api`: the host API's shapes, error sorting and the stats range (plain
//!   Rust, tested natively).
//! - `model`: what the panel shows, as data; `view` and `chart`: pure
//!   components (model → markup) that render in the browser and natively
//!   (`ssr`) for the snapshot tests in `tests/`.
//! - `app` (wasm32 only): the session handshake with the console, the API
//!   calls and the signals the components read.

pub mod api;
pub mod chart;
pub mod model;
pub mod view;

#[cfg(target_arch = "wasm32")]
mod app;
