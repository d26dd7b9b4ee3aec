//! A task's waker that notes its wakes, so that a task polls only what may have moved.
//!
//! Two uses, both to spare a task polls that can only find nothing new:
//! - [`NotingWaker::poll_holding`]: the two ends of hyper's channel between a connection and its answer,
//!   polled in turn in one task. Each end wakes the other's waker when it moves (a chunk handed over, a slot
//!   freed, more wanted), and in one task each such wake polls the whole task once more, for nothing.
//! - [`NotingWaker::woken`]: a future that returned `Pending` and was not woken since would return `Pending`
//!   again, so a reader polled again for other reasons (hyper asks a body once more after each frame) need
//!   not poll it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// Polls through a waker of its own that wraps the task's; made again when the task changes.
#[derive(Default)]
pub struct NotingWaker {
    waker: Option<(Waker, Arc<Note>)>,
}

struct Note {
    task: Waker,
    /// Woken since the poll began.
    woken: AtomicBool,
    /// While true, a wake is only noted: the poll under way passes it on if it ends waiting.
    holding: AtomicBool,
}

impl Wake for Note {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        // Still holding after the note: the poll's end sees the note.
        if self.holding.load(Ordering::SeqCst) {
            return;
        }
        self.task.wake_by_ref();
    }
}

impl NotingWaker {
    /// Polls with `poll`, holding wakes back until it returns: a poll that ends waiting passes them on, once
    /// (one may have come from elsewhere); one that ends ready owes no wake, as what the wakes told of stays
    /// in what was polled (a socket's readiness, a channel's state) for the caller's next poll to find. Only
    /// for what is polled whole inside `poll`, where every wake it causes is seen before it returns.
    pub fn poll_holding<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let (waker, note) = self.for_task(cx);
        note.holding.store(true, Ordering::SeqCst);
        let polled = poll(&mut Context::from_waker(waker));
        note.holding.store(false, Ordering::SeqCst);
        if note.woken.load(Ordering::SeqCst) && polled.is_pending() {
            cx.waker().wake_by_ref();
        }
        polled
    }

    /// Polls with `poll`, passing every wake on and noting it for [`NotingWaker::woken`].
    pub fn poll_noting<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<T>,
    ) -> Poll<T> {
        let (waker, _) = self.for_task(cx);
        poll(&mut Context::from_waker(waker))
    }

    /// Whether anything polled through this waker may have moved since its last poll: it was woken, or
    /// the task changed (what it waits for would wake the other task), or it was never polled.
    pub fn woken(&self, cx: &Context<'_>) -> bool {
        match &self.waker {
            Some((_, note)) if note.task.will_wake(cx.waker()) => note.woken.load(Ordering::SeqCst),
            _ => true,
        }
    }

    /// The waker for `cx`'s task, its note cleared for the poll to come.
    fn for_task(&mut self, cx: &Context<'_>) -> (&Waker, &Note) {
        let current = matches!(&self.waker, Some((_, note)) if note.task.will_wake(cx.waker()));
        if !current {
            let note = Arc::new(Note {
                task: cx.waker().clone(),
                woken: AtomicBool::new(false),
                holding: AtomicBool::new(false),
            });
            self.waker = Some((Waker::from(Arc::clone(&note)), note));
        }
        let (waker, note) = self.waker.as_ref().expect("set above");
        // Cleared before the poll: a wake during it counts.
        note.woken.store(false, Ordering::SeqCst);
        (waker, note)
    }
}

/// A waker that counts its wakes, for tests.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct WakeCount(std::sync::atomic::AtomicUsize);

#[cfg(test)]
impl WakeCount {
    pub(crate) fn waker() -> (Waker, Arc<WakeCount>) {
        let count = Arc::new(WakeCount::default());
        (Waker::from(Arc::clone(&count)), count)
    }

    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A poll under test that wakes the waker it is given, then returns `polled`.
    fn wake_and<T>(polled: Poll<T>) -> impl FnOnce(&mut Context<'_>) -> Poll<T> {
        move |cx| {
            cx.waker().wake_by_ref();
            polled
        }
    }

    #[test]
    fn wakes_held_while_polling_pass_once_if_the_poll_waits_and_never_if_it_ends_ready() {
        let (task, wakes) = WakeCount::waker();
        let mut cx = Context::from_waker(&task);
        let mut noting = NotingWaker::default();

        assert_eq!(
            noting.poll_holding(&mut cx, wake_and(Poll::Ready(1))),
            Poll::Ready(1)
        );
        assert_eq!(wakes.get(), 0, "a ready poll owes no wake");

        let twice = |cx: &mut Context<'_>| {
            cx.waker().wake_by_ref();
            cx.waker().wake_by_ref();
            Poll::<()>::Pending
        };
        assert_eq!(noting.poll_holding(&mut cx, twice), Poll::Pending);
        assert_eq!(wakes.get(), 1, "a waiting poll passes its wakes on, once");

        let mut kept = None;
        let _ = noting.poll_holding(&mut cx, |cx| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert_eq!(wakes.get(), 1, "nothing woke it while it was polled");
        kept.unwrap().wake();
        assert_eq!(wakes.get(), 2, "a wake after the poll passes at once");
    }

    #[test]
    fn woken_tells_a_wake_since_the_last_poll_or_another_task() {
        let (task, wakes) = WakeCount::waker();
        let mut cx = Context::from_waker(&task);
        let mut noting = NotingWaker::default();
        assert!(noting.woken(&cx), "never polled");

        let mut kept = None;
        let _ = noting.poll_noting(&mut cx, |cx| {
            kept = Some(cx.waker().clone());
            Poll::<()>::Pending
        });
        assert!(!noting.woken(&cx));
        kept.unwrap().wake();
        assert!(noting.woken(&cx));
        assert_eq!(wakes.get(), 1, "the wake passed on");

        let _ = noting.poll_noting(&mut cx, wake_and(Poll::<()>::Pending));
        assert!(noting.woken(&cx), "woken while polled");
        let _ = noting.poll_noting(&mut cx, |_| Poll::<()>::Pending);
        assert!(!noting.woken(&cx), "cleared by the next poll");

        let (other, _) = WakeCount::waker();
        assert!(noting.woken(&Context::from_waker(&other)), "another task");
    }
}
