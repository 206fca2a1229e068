//! Which waiting request starts next: the request port's shares of handler capacity
//! between classes of requests ([`Class`]), a pure policy the intake drives
//! (`intake.rs`). No I/O, no clock: a test drives it step by step.
//!
//! Three classes, each with its own queue (in arrival order) and its own bound on the
//! requests of the class in flight ([`Shares::new`]):
//!
//! - **sign-ins** (`_auth`: an RSA decryption and a signature, about 1 to 2 ms of a core);
//! - **returns** (`_return`, `_syndic_return`: tens of microseconds and a group commit);
//! - **the rest** (pillar, files, events, mine, `ping`, and what cannot be classed).
//!
//! When a start is possible the next class is chosen by smooth weighted round-robin
//! among the classes that have a request waiting and are below their bound in flight:
//! each such class gains its weight in credit, the one with the most credit starts its
//! oldest request and pays the credit of all of them. With equal weights, classes with
//! waiting requests alternate, so a queue of 8,000 sign-ins delays a return by at most
//! one sign-in's start, and a blast of returns delays a sign-in by at most one return's
//! start each. The bounds in flight keep one class from holding every permit of the
//! port (a storm of sign-ins, each holding its permit while its RSA waits for a core,
//! would otherwise leave none for a return), and keep sign-ins waiting in the queue,
//! where a sign-in whose minion gave up is dropped before any RSA is spent on it.
//!
//! In FIFO mode (`halite_request_fifo: True`) the oldest waiting request starts,
//! whatever its class, with no bound but the port's: one queue in arrival order.

use std::collections::VecDeque;

/// A class of requests (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    SignIn,
    Return,
    Other,
}

impl Class {
    pub const ALL: [Class; 3] = [Class::SignIn, Class::Return, Class::Other];

    pub fn index(self) -> usize {
        match self {
            Class::SignIn => 0,
            Class::Return => 1,
            Class::Other => 2,
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::SignIn => "sign_in",
            Class::Return => "return",
            Class::Other => "other",
        }
    }
}

/// Each class's weight in the round-robin: equal shares of starts.
pub const WEIGHTS: [i64; 3] = [1, 1, 1];

/// The waiting requests of every class and the requests of each in flight.
pub struct Shares<T> {
    queues: [VecDeque<(u64, T)>; 3],
    in_flight: [usize; 3],
    /// Most requests of each class in flight.
    caps: [usize; 3],
    credit: [i64; 3],
    fifo: bool,
    /// Arrival order (FIFO mode picks the lowest head).
    seq: u64,
}

impl<T> Shares<T> {
    /// Fair shares with at most `caps[class.index()]` requests of a class in flight.
    pub fn new(caps: [usize; 3]) -> Self {
        Shares { queues: Default::default(), in_flight: [0; 3], caps: caps.map(|c| c.max(1)), credit: [0; 3], fifo: false, seq: 0 }
    }

    /// One queue in arrival order, no bound per class.
    pub fn fifo() -> Self {
        let mut s = Shares::new([usize::MAX; 3]);
        s.fifo = true;
        s
    }

    pub fn push(&mut self, class: Class, item: T) {
        self.seq += 1;
        self.queues[class.index()].push_back((self.seq, item));
    }

    /// The request to start next, counted in flight until [`Shares::done`]; `None` if
    /// nothing waits or every class that waits is at its bound.
    pub fn pick(&mut self) -> Option<(Class, T)> {
        let eligible = |s: &Self, i: usize| !s.queues[i].is_empty() && s.in_flight[i] < s.caps[i];
        let pick = if self.fifo {
            (0..3).filter(|&i| eligible(self, i)).min_by_key(|&i| self.queues[i].front().map(|(seq, _)| *seq))?
        } else {
            let ready: [bool; 3] = std::array::from_fn(|i| eligible(self, i));
            let total: i64 = (0..3).filter(|&i| ready[i]).map(|i| WEIGHTS[i]).sum();
            if total == 0 {
                return None;
            }
            for i in (0..3).filter(|&i| ready[i]) {
                self.credit[i] += WEIGHTS[i];
            }
            // Ties go to the lower index: deterministic.
            let best = (0..3).filter(|&i| ready[i]).max_by_key(|&i| (self.credit[i], std::cmp::Reverse(i)))?;
            self.credit[best] -= total;
            best
        };
        let (_, item) = self.queues[pick].pop_front()?;
        self.in_flight[pick] += 1;
        Some((Class::ALL[pick], item))
    }

    /// A request of `class` started by [`Shares::pick`] is over (answered or dropped).
    /// Returns whether that lets a waiting request of the class start that its bound
    /// held back (the class was at its bound with requests waiting).
    pub fn done(&mut self, class: Class) -> bool {
        let i = class.index();
        let was_full = self.in_flight[i] >= self.caps[i];
        self.in_flight[i] = self.in_flight[i].saturating_sub(1);
        was_full && !self.queues[i].is_empty()
    }

    /// Requests of `class` waiting.
    pub fn waiting(&self, class: Class) -> usize {
        self.queues[class.index()].len()
    }

    /// Requests of `class` in flight.
    pub fn in_flight(&self, class: Class) -> usize {
        self.in_flight[class.index()]
    }
}

#[cfg(test)]
#[path = "shares_tests.rs"]
mod tests;
