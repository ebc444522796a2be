//! A future that is polled again only when it asked to be.
//!
//! A relayed connection's task wakes for socket readiness a few times per
//! connection, and `select!` then polls every branch. A branch waiting
//! for something rare (a route change, the kill switch) costs a poll of
//! tokio's `Notified` on each of those wakes, and that poll takes a mutex.
//! Behind [`Woken`] such a branch is polled with a waker of its own, and
//! only after that waker fired: the other wakes cost an atomic swap.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Polls the future it holds only on its first poll and after the future
/// itself was woken.
pub(super) struct Woken<'f, F: ?Sized> {
    future: Pin<&'f mut F>,
    flag: Arc<Flag>,
    waker: Waker,
}

/// Whether the inner future was woken since its last poll, and the task
/// to wake when it is.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<'f, F: Future + ?Sized> Woken<'f, F> {
    pub fn new(future: Pin<&'f mut F>) -> Self {
        let flag = Arc::new(Flag {
            // The first poll goes through: the future has not asked yet.
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        Woken {
            future,
            flag,
            waker,
        }
    }
}

impl<F: Future + ?Sized> Future for Woken<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Registered before the flag is read: a wake in between sets the
        // flag this poll sees, a wake after it wakes this task.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.future
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `ready` is set, woken through the
    /// waker it was last polled with.
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.ready.load(Ordering::Relaxed) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    /// Counts the wakes of the task polling the [`Woken`].
    struct TaskWakes(AtomicUsize);

    impl Wake for TaskWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_inner_future_is_polled_once_and_then_only_after_its_own_wake() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(std::sync::Mutex::new(None::<Waker>));
        let mut probe = Probe {
            polls: polls.clone(),
            ready: ready.clone(),
            waker: inner_waker.clone(),
        };
        let mut woken = Woken::new(Pin::new(&mut probe));
        let wakes = Arc::new(TaskWakes(AtomicUsize::new(0)));
        let task = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&task);

        assert!(Pin::new(&mut woken).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::Relaxed), 1);
        // The task woke for something else: the inner future is left alone.
        for _ in 0..5 {
            assert!(Pin::new(&mut woken).poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1);

        // Its event comes: the task is woken and the next poll reaches it.
        ready.store(true, Ordering::Relaxed);
        inner_waker.lock().unwrap().take().unwrap().wake();
        assert_eq!(wakes.0.load(Ordering::Relaxed), 1);
        assert!(Pin::new(&mut woken).poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_watch_change_behind_it_is_seen() {
        let (tx, mut rx) = tokio::sync::watch::channel(0);
        let changed = std::pin::pin!(rx.changed());
        let woken = Woken::new(changed);
        let (seen, ()) = tokio::join!(woken, async {
            tokio::task::yield_now().await;
            tx.send(1).unwrap();
        });
        assert!(seen.is_ok());
    }
}
