//! Spare read buffers, per thread: a connection that closes, or goes
//! idle, leaves its read buffers for the next request on its thread
//! instead of giving them to the allocator, which hands a buffer of a
//! read's size (16 KiB) out of its slower, medium-page path. Each
//! connection (and a `Connection: close` request is one) took two such
//! buffers and gave them back.
//!
//! The head buffers (1 KiB) of a connection's request and response go
//! the same way.
//!
//! Bounded ([`SPARES`] per size class and [`BUDGET`] bytes per thread),
//! so an idle connection still holds nothing and the spares are at most
//! 2 MiB per thread; [`clear`] gives them to the allocator (the serving
//! threads call it when they give memory back, so a quiet thread's RSS
//! still falls). The count is sized for a burst: connections that go idle
//! together (a batch of answers in one turn of the event loop) give back
//! their buffers together, and the next batch of requests takes them;
//! with 16 per class, over half of the takes under 64 busy keep-alive
//! connections found none and went to the allocator.

use std::cell::RefCell;

/// Spares kept per size class and thread.
pub const SPARES: usize = 64;

/// Bytes of spares kept per thread, all classes together.
pub const BUDGET: usize = 2 * 1024 * 1024;

/// Largest buffer kept: a read buffer that grew for a large head or body
/// goes back to the allocator.
const MAX_SPARE: usize = 64 * 1024;

/// Where the size classes start: header edits ([`SMALL`]), heads and
/// the access log's copy of a request line (1 KiB), an idle connection's
/// first read (2 KiB), reads (16 KiB).
const CLASSES: [usize; 4] = [0, 1024, 2 * 1024, 8 * 1024];

/// The least a buffer of the smallest class is taken with, so that any
/// spare of that class fits the next small take.
pub const SMALL: usize = 512;

struct Spares {
    classes: [Vec<Vec<u8>>; 4],
    /// Their capacities' sum.
    held: usize,
}

impl Spares {
    const EMPTY: Spares = Spares {
        classes: [const { Vec::new() }; 4],
        held: 0,
    };

    fn class(&mut self, size: usize) -> &mut Vec<Vec<u8>> {
        // Compared in line: a take or give is on every request's path,
        // about eighteen times.
        let i = usize::from(size >= CLASSES[1])
            + usize::from(size >= CLASSES[2])
            + usize::from(size >= CLASSES[3]);
        &mut self.classes[i]
    }
}

thread_local! {
    // Initialised as a constant: no lazy initialisation to check on each
    // access.
    static SPARE: RefCell<Spares> = const { RefCell::new(Spares::EMPTY) };
}

/// An empty buffer with room for at least `min` bytes: a spare when one
/// is that large, else a new one of `min`.
pub fn take(min: usize) -> Vec<u8> {
    let spare = SPARE
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let class = s.class(min);
            let b = match class.last() {
                Some(b) if b.capacity() >= min => class.pop(),
                _ => None,
            };
            if let Some(b) = &b {
                s.held -= b.capacity();
            }
            b
        })
        .ok()
        .flatten();
    spare.unwrap_or_else(|| Vec::with_capacity(min))
}

/// Keeps `buf` (emptied) for the next [`take`] on this thread, unless it
/// holds nothing, is too large, or the spares are full.
pub fn give(mut buf: Vec<u8>) {
    let capacity = buf.capacity();
    // Below the least a take asks (a vector that grew from nothing): it
    // would sit on top of its class and fit no take.
    if !(SMALL..=MAX_SPARE).contains(&capacity) {
        return;
    }
    buf.clear();
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.held + capacity > BUDGET {
            return;
        }
        let class = s.class(capacity);
        if class.len() < SPARES {
            class.push(buf);
            s.held += capacity;
        }
    });
}

/// Gives this thread's spares to the allocator.
pub fn clear() {
    let _ = SPARE.try_with(|s| *s.borrow_mut() = Spares::EMPTY);
}

/// Bytes of spares this thread holds.
pub fn held() -> usize {
    SPARE
        .try_with(|s| {
            let s = s.borrow();
            s.classes.iter().flatten().map(Vec::capacity).sum()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_is_taken_again_and_the_spares_are_bounded() {
        clear();
        let mut b = take(16 * 1024);
        b.extend_from_slice(b"GET / HTTP/1.1\r\n");
        let at = b.as_ptr();
        give(b);
        let again = take(16 * 1024);
        assert_eq!(again.as_ptr(), at, "the same buffer");
        assert!(again.is_empty());
        assert!(again.capacity() >= 16 * 1024);
        give(again);
        // A small request takes a small spare, never the read buffer.
        let small = take(2048);
        assert!(small.capacity() < CLASSES[3]);
        give(small);
        let head = take(1024);
        assert!(head.capacity() < CLASSES[2], "a head, not the 2 KiB read");
        give(head);
        // Edits take the small class, and never find a vector too small
        // for them there.
        give(Vec::with_capacity(100));
        let edits = take(SMALL);
        assert!(edits.capacity() >= SMALL && edits.capacity() < CLASSES[1]);
        give(edits);
        for _ in 0..3 * SPARES {
            give(Vec::with_capacity(32 * 1024));
            give(Vec::with_capacity(1024));
        }
        give(Vec::with_capacity(1 << 20));
        assert!(held() <= BUDGET, "{}", held());
        // The budget bounds all classes together, and is filled.
        assert!(held() > BUDGET - 32 * 1024, "{}", held());
        clear();
        assert_eq!(held(), 0);
    }
}
