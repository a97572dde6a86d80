//! The host side of `platform:extension@0.1.0`, generated from `wit/`:
//! one `Host` trait per imported interface (each implemented by its
//! capability module) and the world's typed exports.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "managed-extension",
    imports: { default: trappable },
});
