//! The allocator: mimalloc, the settings it reads at start
//! ([`teapot_proxy::compile::ALLOCATOR_ENV`]), and giving freed memory
//! back when a thread goes quiet.
//!
//! mimalloc purges freed pages after its purge delay, but only when the
//! thread that freed them calls into it again. A serving thread that goes
//! quiet after a burst of connections never does, so the burst's pages
//! stayed resident until the next request. [`return_freed_memory`], called
//! by a thread about to sleep (at most once a second, see
//! `teapot_proxy::plane::serving::parked`), lets mimalloc purge what has
//! waited out its delay: the process shrinks back within the delay after
//! a burst, as docs/capacity.md measures. These two are the crate's only
//! unsafe code (docs/decisions.md, "Quiet threads give freed memory back"
//! and "Word-aligned allocations take mimalloc's regular path").

// glibc's malloc spent a quarter of a route-table compile in allocation and
// free; mimalloc is the usual choice for Rust proxies (per-thread heaps, no
// lock on the request path). See docs/decisions.md.
#[global_allocator]
static ALLOCATOR: Mimalloc = Mimalloc;

/// mimalloc, asked for alignment only where a request needs more than
/// every mimalloc block has.
///
/// The mimalloc crate passes every Rust allocation to `mi_malloc_aligned`,
/// even those aligned to 8 or less. mimalloc v3 serves those from its
/// regular size classes only up to 1 KiB; above that, unless the block
/// size is a power of two, it over-allocates and offsets (about 400
/// instructions, where `mi_malloc` takes about 40), which the HTTP/1
/// engine's per-request futures (1-2 KiB) paid on every request. Every
/// mimalloc block is aligned to at least a word (its size classes are
/// whole words, its pages start aligned), so `mi_malloc` answers those
/// requests exactly as the aligned call would; larger alignments still
/// take the aligned calls. `mi_free` frees both.
struct Mimalloc;

/// The alignment every block `mi_malloc` returns has.
const WORD: usize = std::mem::size_of::<usize>();

// SAFETY: each method forwards to the mimalloc function that keeps the
// `GlobalAlloc` contract for its layout: `mi_malloc`, `mi_zalloc` and
// `mi_realloc` return blocks aligned to at least a word (see `Mimalloc`),
// and are used only when the layout asks no more; otherwise the `_aligned`
// forms, exactly as the mimalloc crate's `MiMalloc` does. Null on failure,
// as the contract expects; `mi_free` takes any block either form returned.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    #[inline]
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        // SAFETY: see the impl.
        unsafe { new_block(layout, mi_malloc, mi_malloc_aligned) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_zalloc, mi_zalloc_aligned};
        // SAFETY: see the impl.
        unsafe { new_block(layout, mi_zalloc, mi_zalloc_aligned) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from this allocator (the caller's contract).
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        // SAFETY: see the impl; `ptr` came from this allocator with `layout`.
        unsafe {
            if layout.align() <= WORD {
                mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast(), new_size, layout.align()).cast()
            }
        }
    }
}

/// A block for `layout` from `word` (a word's alignment, which every
/// mimalloc block has) when the layout asks no more, else from `aligned`.
///
/// # Safety
/// `word` and `aligned` are mimalloc's allocation calls of one kind
/// (`mi_malloc` and `mi_malloc_aligned`, or `mi_zalloc` and
/// `mi_zalloc_aligned`).
#[allow(unsafe_code)]
#[inline(always)]
unsafe fn new_block(
    layout: std::alloc::Layout,
    word: unsafe extern "C" fn(usize) -> *mut std::ffi::c_void,
    aligned: unsafe extern "C" fn(usize, usize) -> *mut std::ffi::c_void,
) -> *mut u8 {
    // SAFETY: the caller passes mimalloc's calls; any size is theirs to
    // take, and a power-of-two alignment (a `Layout`'s) the aligned one's.
    unsafe {
        if layout.align() <= WORD {
            word(layout.size()).cast()
        } else {
            aligned(layout.size(), layout.align()).cast()
        }
    }
}

/// Re-executes this binary once with those of `ALLOCATOR_ENV` the
/// operator did not set: mimalloc reads them only at process start, and
/// setting them in every unit file, chart and shell is what nobody
/// remembers. `exec` keeps the pid, so supervisors see nothing.
pub(crate) fn tune() {
    use std::os::unix::process::CommandExt;
    use teapot_proxy::compile::ALLOCATOR_ENV;
    let unset: Vec<(&str, &str)> = ALLOCATOR_ENV
        .into_iter()
        .filter(|(name, _)| std::env::var_os(name).is_none())
        .collect();
    if unset.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let error = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .envs(unset)
        .exec();
    // Only reached when exec failed: run untuned rather than not at all.
    eprintln!("teapot: cannot re-execute with allocator settings ({error}); continuing");
}

/// Lets mimalloc free this thread's empty pages and purge what has waited
/// out its purge delay (not forced: memory freed a moment ago stays for
/// reuse, as the delay intends).
#[allow(unsafe_code)]
pub(crate) fn return_freed_memory() {
    // SAFETY: mi_collect takes no arguments that point anywhere; it works
    // on the calling thread's own heap and on the shared arenas, which
    // mimalloc locks itself, and any thread may call it at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
