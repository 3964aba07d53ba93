//! Handing freed heap memory back to the system.
//!
//! [`configure`] fixes glibc's threshold for serving an allocation with its
//! own mapping at 128 KiB (by default it rises with every large block freed,
//! after which large buffers, such as a page of a thousand tasks on its way
//! to the bus, stay in the heap once freed) and keeps the arenas to two, so
//! that freed room is not spread over one arena per thread.
//!
//! glibc's allocator keeps what a drained backlog freed (thousands of small
//! task records across the engine's and the bus threads' arenas) as free
//! room inside the process, so the resident size would stay at the
//! backlog's peak. The engine calls [`give_back`] when its task table has
//! shrunk to a quarter of its peak, which is rare, and the trim costs a walk
//! of the heap (milliseconds for a hundred megabytes).

/// Returns the free pages of every arena to the system (`malloc_trim(0)`);
/// nothing where the C library is not glibc.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory the allocator holds free;
    // it is thread-safe and touches no live allocation.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Sets the allocator's thresholds (see the module documentation); called
/// once at start, before the threads.
pub fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's tuning parameters.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
