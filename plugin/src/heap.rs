//! The component's allocator: dlmalloc, the allocator Rust's std uses on
//! wasm, with one difference in where its memory comes from.
//!
//! std's dlmalloc asks for every region with `memory.grow`, so the free
//! linear memory the module starts with (above `__heap_base`) goes unused
//! and every invocation grows memory. Growing makes the host change the
//! instance's accessible memory and change it back when the pooled slot is
//! reused: two `mprotect` calls and a TLB flush per invocation. This system
//! layer hands out the initial free memory first and grows only when an
//! invocation needs more (the initial size is set in `build.rs`).

use core::alloc::{GlobalAlloc, Layout};
use core::arch::wasm32;
use core::cell::{Cell, UnsafeCell};
use core::ptr;

use dlmalloc::{Allocator, Dlmalloc};

const PAGE: usize = 64 * 1024;

unsafe extern "C" {
    /// First byte after the stack and the data segments (set by wasm-ld).
    static __heap_base: u8;
}

/// Linear memory for dlmalloc: the initial free memory once, then
/// `memory.grow`.
struct InitialThenGrow {
    initial_taken: Cell<bool>,
}

// SAFETY (for every `unsafe impl` below): the component is single-threaded;
// wasm32 without the atomics feature has no threads.
unsafe impl Allocator for InitialThenGrow {
    fn alloc(&self, size: usize) -> (*mut u8, usize, u32) {
        if !self.initial_taken.replace(true) {
            let start = (&raw const __heap_base as usize).next_multiple_of(16);
            let end = wasm32::memory_size(0) * PAGE;
            if end.saturating_sub(start) >= size {
                return (start as *mut u8, end - start, 0);
            }
        }
        let pages = size.div_ceil(PAGE);
        let previous = wasm32::memory_grow(0, pages);
        if previous == usize::MAX {
            return (ptr::null_mut(), 0, 0);
        }
        ((previous * PAGE) as *mut u8, pages * PAGE, 0)
    }

    fn remap(&self, _ptr: *mut u8, _old: usize, _new: usize, _can_move: bool) -> *mut u8 {
        ptr::null_mut()
    }

    fn free_part(&self, _ptr: *mut u8, _old: usize, _new: usize) -> bool {
        false
    }

    fn free(&self, _ptr: *mut u8, _size: usize) -> bool {
        false
    }

    fn can_release_part(&self, _flags: u32) -> bool {
        false
    }

    /// Memory above `__heap_base` is zero when the instance starts, and so is
    /// memory that `memory.grow` adds.
    fn allocates_zeros(&self) -> bool {
        true
    }

    fn page_size(&self) -> usize {
        PAGE
    }
}

struct Heap(UnsafeCell<Dlmalloc<InitialThenGrow>>);

unsafe impl Sync for Heap {}

#[global_allocator]
static HEAP: Heap = Heap(UnsafeCell::new(Dlmalloc::new_with_allocator(
    InitialThenGrow {
        initial_taken: Cell::new(false),
    },
)));

// SAFETY: single-threaded (see above), and dlmalloc never allocates while it
// serves a call, so `&mut` to the heap is never taken twice.
unsafe impl GlobalAlloc for Heap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { (*self.0.get()).malloc(layout.size(), layout.align()) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { (*self.0.get()).calloc(layout.size(), layout.align()) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { (*self.0.get()).free(ptr, layout.size(), layout.align()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { (*self.0.get()).realloc(ptr, layout.size(), layout.align(), new_size) }
    }
}
