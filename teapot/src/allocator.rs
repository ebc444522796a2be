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
//! a burst, as docs/capacity.md measures. It is the crate's only unsafe
//! code (docs/decisions.md, "Quiet threads give freed memory back").

// glibc's malloc spent a quarter of a route-table compile in allocation and
// free; mimalloc is the usual choice for Rust proxies (per-thread heaps, no
// lock on the request path). See docs/decisions.md.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
