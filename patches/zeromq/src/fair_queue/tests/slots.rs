//! The slots of the fair queue: a stream removed or replaced while it is polled is
//! dropped when its poll returns (its item with it) and is never polled again; a
//! wake-up of a stream that has left its slot is ignored, also when the slot has a new
//! occupant; and a stream holding its own waker does not keep the queue alive.

use crate::fair_queue::FairQueue;
use futures::task::noop_waker;
use futures::Stream;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

type Inner = Arc<parking_lot::Mutex<crate::fair_queue::QueueInner<Probe, &'static str>>>;

/// A stream that yields its items, can run an action during its next poll, keeps the
/// waker it was last polled with (as an I/O stream registers it), and counts drops.
struct Probe {
    items: Vec<&'static str>,
    during_poll: Option<Box<dyn FnOnce() + Send>>,
    waker: Arc<Mutex<Option<Waker>>>,
    polls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Probe {
    fn new(items: &[&'static str]) -> (Probe, Arc<Mutex<Option<Waker>>>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
        let waker = Arc::new(Mutex::new(None));
        let (polls, drops) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let p = Probe { items: items.iter().rev().copied().collect(), during_poll: None, waker: waker.clone(), polls: polls.clone(), drops: drops.clone() };
        (p, waker, polls, drops)
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

impl Stream for Probe {
    type Item = &'static str;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        this.polls.fetch_add(1, Ordering::SeqCst);
        *this.waker.lock().unwrap() = Some(cx.waker().clone());
        if let Some(f) = this.during_poll.take() {
            f();
        }
        match this.items.pop() {
            Some(i) => Poll::Ready(Some(i)),
            None => Poll::Pending,
        }
    }
}

fn poll(q: &mut FairQueue<Probe, &'static str>) -> Poll<Option<(&'static str, &'static str)>> {
    let waker = noop_waker();
    Pin::new(q).poll_next(&mut Context::from_waker(&waker))
}

fn wake(w: &Arc<Mutex<Option<Waker>>>) {
    if let Some(w) = w.lock().unwrap().as_ref() {
        w.wake_by_ref();
    }
}

#[test]
fn a_stream_removed_while_it_is_polled_is_dropped_with_its_item() {
    let mut q: FairQueue<Probe, &'static str> = FairQueue::new(true);
    let inner: Inner = q.inner();
    let (mut a, _, polls, drops) = Probe::new(&["a1", "a2"]);
    let handle = inner.clone();
    a.during_poll = Some(Box::new(move || handle.lock().remove(&"a")));
    inner.lock().insert("a", a);
    assert_eq!(poll(&mut q), Poll::Pending, "its item went with it");
    assert_eq!(drops.load(Ordering::SeqCst), 1, "dropped when its poll returned");
    assert_eq!(poll(&mut q), Poll::Pending);
    assert_eq!(polls.load(Ordering::SeqCst), 1, "never polled again");
}

#[test]
fn a_stream_replaced_while_it_is_polled_gives_way_to_the_new_one() {
    let mut q: FairQueue<Probe, &'static str> = FairQueue::new(true);
    let inner: Inner = q.inner();
    let (mut old, _, _, old_drops) = Probe::new(&["old"]);
    let (new, _, _, _) = Probe::new(&["new"]);
    let handle = inner.clone();
    let new = Mutex::new(Some(new));
    old.during_poll = Some(Box::new(move || {
        let n = new.lock().unwrap().take().unwrap();
        handle.lock().insert("k", n);
    }));
    inner.lock().insert("k", old);
    assert_eq!(poll(&mut q), Poll::Pending, "the old one's item dropped (the new one was ready only after this call began)");
    assert_eq!(old_drops.load(Ordering::SeqCst), 1);
    assert_eq!(poll(&mut q), Poll::Ready(Some(("k", "new"))), "the new one polled");
}

#[test]
fn a_wake_up_of_a_stream_that_left_is_ignored_even_by_its_slots_next_occupant() {
    let mut q: FairQueue<Probe, &'static str> = FairQueue::new(true);
    let inner: Inner = q.inner();
    let (a, a_waker, _, _) = Probe::new(&[]);
    inner.lock().insert("a", a);
    assert_eq!(poll(&mut q), Poll::Pending);
    inner.lock().remove(&"a");
    // "b" takes the slot "a" had; "a"'s late wake-up must not mark "b" ready.
    let (b, _, b_polls, _) = Probe::new(&[]);
    inner.lock().insert("b", b);
    assert_eq!(poll(&mut q), Poll::Pending);
    assert_eq!(b_polls.load(Ordering::SeqCst), 1);
    wake(&a_waker);
    assert_eq!(inner.lock().ready_len(), 0, "the stale wake-up queued nothing");
    assert_eq!(poll(&mut q), Poll::Pending);
    assert_eq!(b_polls.load(Ordering::SeqCst), 1, "b was not polled for a's wake-up");
}

#[test]
fn a_woken_stream_is_polled_once_per_wake_up_in_the_order_woken() {
    let mut q: FairQueue<Probe, &'static str> = FairQueue::new(true);
    let inner: Inner = q.inner();
    let (a, a_waker, _, _) = Probe::new(&[]);
    let (b, b_waker, _, _) = Probe::new(&[]);
    inner.lock().insert("a", a);
    inner.lock().insert("b", b);
    assert_eq!(poll(&mut q), Poll::Pending);
    inner.lock().stream_mut(&"b").unwrap().as_mut().get_mut().items.push("b1");
    inner.lock().stream_mut(&"a").unwrap().as_mut().get_mut().items.push("a1");
    wake(&b_waker);
    wake(&a_waker);
    wake(&b_waker);
    assert_eq!(inner.lock().queued_len(), 2, "each stream queued once");
    assert_eq!(poll(&mut q), Poll::Ready(Some(("b", "b1"))));
    assert_eq!(poll(&mut q), Poll::Ready(Some(("a", "a1"))));
}

#[test]
fn streams_holding_their_wakers_do_not_keep_the_queue_alive() {
    let q: FairQueue<Probe, &'static str> = FairQueue::new(true);
    let (a, a_waker, _, drops) = Probe::new(&[]);
    q.inner().lock().insert("a", a);
    let mut q = q;
    assert_eq!(poll(&mut q), Poll::Pending);
    assert!(a_waker.lock().unwrap().is_some(), "the stream holds its waker");
    drop(q);
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the queue and its stream were freed");
    wake(&a_waker);
}
