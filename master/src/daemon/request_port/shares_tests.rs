//! The shares driven step by step: no sockets, no clock, no sleeps. A simulated port
//! ([`Port`]) starts what the shares pick while it has permits and finishes each
//! request after its cost in ticks, as handlers on a fixed number of cores would.

use super::*;

/// A request: its class and its arrival number.
type Req = (Class, usize);

/// `n` requests of `class` arrive, numbered from 0.
fn arrive(s: &mut Shares<Req>, class: Class, n: usize) {
    for i in 0..n {
        s.push(class, (class, i));
    }
}

/// Starts up to `n` requests, as the intake does when `n` permits are free.
fn start_n(s: &mut Shares<Req>, n: usize) -> Vec<Req> {
    (0..n).map_while(|_| s.pick().map(|(c, r)| {
        assert_eq!(c, r.0, "a request starts in its own class");
        r
    })).collect()
}

#[test]
fn waiting_classes_alternate_however_long_one_queue_is() {
    let mut s = Shares::new([usize::MAX; 3]);
    arrive(&mut s, Class::SignIn, 8000);
    arrive(&mut s, Class::Return, 100);
    let first = start_n(&mut s, 200);
    // Every return among the first 200 starts, one every other start.
    let returns: Vec<usize> = first.iter().enumerate().filter(|(_, r)| r.0 == Class::Return).map(|(at, _)| at).collect();
    assert_eq!(returns.len(), 100);
    assert!(returns.iter().enumerate().all(|(k, &at)| at <= 2 * k + 1), "the k-th return starts by start 2k+1: {returns:?}");
    // Each class in its own arrival order.
    let signins: Vec<usize> = first.iter().filter(|r| r.0 == Class::SignIn).map(|r| r.1).collect();
    assert_eq!(signins, (0..100).collect::<Vec<_>>());
}

#[test]
fn a_blast_of_returns_lets_sign_ins_through() {
    let mut s = Shares::new([usize::MAX; 3]);
    arrive(&mut s, Class::Return, 30_000);
    for i in 0..50 {
        s.push(Class::SignIn, (Class::SignIn, i));
        s.push(Class::Other, (Class::Other, i));
    }
    let first = start_n(&mut s, 150);
    for c in Class::ALL {
        assert_eq!(first.iter().filter(|r| r.0 == c).count(), 50, "equal shares of starts: {c:?}");
    }
    assert_eq!(s.waiting(Class::SignIn), 0);
    assert_eq!(s.waiting(Class::Return), 30_000 - 50);
}

#[test]
fn a_class_at_its_bound_in_flight_leaves_the_permits_to_the_others() {
    let mut s = Shares::new([2, 3, 3]);
    for i in 0..10 {
        s.push(Class::SignIn, (Class::SignIn, i));
    }
    let started = start_n(&mut s, 10);
    assert_eq!(started.len(), 2, "two sign-ins in flight at most");
    assert!(s.pick().is_none(), "the only waiting class is at its bound");
    s.push(Class::Return, (Class::Return, 0));
    assert_eq!(s.pick().map(|(c, _)| c), Some(Class::Return), "a return starts though sign-ins wait");
    assert!(s.done(Class::SignIn), "a class at its bound with requests waiting: the starter must be woken");
    assert_eq!(s.in_flight(Class::SignIn), 1);
    assert_eq!(s.pick().map(|(c, r)| (c, r.1)), Some((Class::SignIn, 2)), "a finished sign-in makes room for the next");
    assert!(s.pick().is_none());
    assert!(!s.done(Class::Return), "below its bound, nothing waits on it");
}

#[test]
fn fifo_mode_starts_in_arrival_order_across_classes() {
    let mut s = Shares::fifo();
    let order = [Class::SignIn, Class::SignIn, Class::Return, Class::Other, Class::SignIn, Class::Return];
    for (i, c) in order.iter().enumerate() {
        s.push(*c, (*c, i));
    }
    let started: Vec<usize> = start_n(&mut s, 10).into_iter().map(|r| r.1).collect();
    assert_eq!(started, (0..order.len()).collect::<Vec<_>>());
}

/// A port with `permits` requests in flight and `cores` units of work done a tick,
/// shared by the requests in flight in turn (a unit each, round-robin, as threads share
/// cores); a request takes its class's cost in units.
struct Port {
    permits: usize,
    cores: u64,
    cost: [u64; 3],
    running: VecDeque<(Req, u64)>,
}

impl Port {
    /// One tick: start what fits, then spend the cores. The requests finished this tick.
    fn tick(&mut self, s: &mut Shares<Req>) -> Vec<Req> {
        while self.running.len() < self.permits {
            let Some((c, r)) = s.pick() else { break };
            self.running.push_back((r, self.cost[c.index()]));
        }
        let mut finished = Vec::new();
        for _ in 0..self.cores {
            let Some((r, left)) = self.running.pop_front() else { break };
            if left <= 1 {
                s.done(r.0);
                finished.push(r);
            } else {
                self.running.push_back((r, left - 1));
            }
        }
        finished
    }
}

/// A sign-in storm (`signins` queued at once) while a return arrives every tick for
/// `returns` ticks: the ticks until every return is stored and the longest any return
/// waited.
fn storm(mut s: Shares<Req>, signins: usize, returns: usize) -> (u64, u64, usize) {
    // A sign-in costs 40 core-ticks, a return one; two cores; 64 permits.
    let mut port = Port { permits: 64, cores: 2, cost: [40, 1, 1], running: VecDeque::new() };
    arrive(&mut s, Class::SignIn, signins);
    let (mut arrived, mut stored, mut signed) = (Vec::new(), 0usize, 0usize);
    let mut longest = 0u64;
    let mut tick = 0u64;
    while stored < returns || signed < signins {
        if tick < returns as u64 {
            s.push(Class::Return, (Class::Return, tick as usize));
            arrived.push(tick);
        }
        for r in port.tick(&mut s) {
            match r.0 {
                Class::Return => {
                    stored += 1;
                    longest = longest.max(tick - arrived[r.1]);
                }
                _ => signed += 1,
            }
        }
        tick += 1;
        assert!(tick < 10_000_000, "the storm ends");
    }
    (tick, longest, signed)
}

#[test]
fn under_a_sign_in_storm_returns_are_stored_at_the_rate_they_come() {
    // 2,000 sign-ins are 80,000 units: 40,000 ticks on two cores.
    let (ticks, longest, signed) = storm(Shares::new([16, 64, 64]), 2000, 1000);
    assert_eq!(signed, 2000, "every sign-in served");
    assert!(longest <= 16, "a return waits for its turn among the requests in flight, not for the storm: {longest} ticks");
    assert!(ticks <= 40_000 + 1000, "the storm takes the sign-ins' work and the returns', no more: {ticks}");
    // In one queue the same returns wait behind the storm.
    let (_, fifo_longest, _) = storm(Shares::fifo(), 2000, 1000);
    assert!(fifo_longest > 10 * longest.max(1), "FIFO: a return waits behind the sign-ins queued before it ({fifo_longest} ticks)");
}
