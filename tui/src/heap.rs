//! Giving freed memory back to the kernel.

/// Returns the allocator's free pages to the kernel, so that the resident size is what the
/// run needs after a burst (BTF parsing at start, thousands of short-lived processes).
/// glibc keeps freed pages in its arenas until `malloc_trim`; musl's allocator (the static
/// build) unmaps freed groups on its own, so there it is nothing.
pub fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions.
    unsafe {
        libc::malloc_trim(0);
    }
}
