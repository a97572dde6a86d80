//! Link settings of the WebAssembly build.

/// The shadow stack (Rust's default is 1 MiB). JSON nesting is capped by
/// serde_json's recursion limit, which stays far below this.
const STACK_SIZE: u64 = 256 << 10;

/// Initial linear memory of the component: the stack and data (~170 KB)
/// first, then free space that the allocator (`src/heap.rs`) uses before it
/// grows memory. An invocation that fits in it never calls `memory.grow`, and
/// the host's pooled memory slot keeps the same accessible size from one
/// instance to the next (no `mprotect` per invocation). Small on purpose:
/// the host resets an instance's memory by scanning every accessible page
/// for the dirty ones.
const INITIAL_MEMORY: u64 = 1 << 20;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("wasm32") {
        println!("cargo:rustc-link-arg-cdylib=-zstack-size={STACK_SIZE}");
        println!("cargo:rustc-link-arg-cdylib=--initial-memory={INITIAL_MEMORY}");
    }
}
