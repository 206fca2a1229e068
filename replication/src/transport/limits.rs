//! The transport's resource bounds ([`Limits`]) and the guards that count connections
//! against them while they are open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::refusal::Refused;

/// The transport's resource bounds (what each bounds: the transport's module documentation).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Accepted connections still in their handshake, at most.
    pub max_unauthenticated: usize,
    /// Time allowed for a whole handshake.
    pub handshake: Duration,
    /// An authenticated connection silent this long is closed.
    pub idle: Duration,
    /// An idle writer sends a keepalive frame this often (well under `idle`).
    pub keepalive: Duration,
    /// Authenticated inbound connections from one member id, at most (a member opens
    /// one for raft, one per snapshot transfer and short ones for control messages).
    pub max_per_peer: usize,
    /// Authenticated inbound connections in all, at most.
    pub max_authenticated: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_unauthenticated: 64,
            handshake: Duration::from_secs(5),
            idle: Duration::from_secs(60),
            keepalive: Duration::from_secs(10),
            max_per_peer: 8,
            max_authenticated: 256,
        }
    }
}

/// One authenticated inbound connection of a member, counted until dropped.
pub(super) struct Authenticated {
    open: Arc<Mutex<HashMap<u64, usize>>>,
    peer: u64,
}

impl Authenticated {
    /// Counts a connection of `peer`, unless that would pass a bound.
    pub(super) fn admit(open: &Arc<Mutex<HashMap<u64, usize>>>, peer: u64, limits: &Limits) -> Result<Self, Refused> {
        let mut m = open.lock().unwrap_or_else(|p| p.into_inner());
        let total: usize = m.values().sum();
        let mine = m.get(&peer).copied().unwrap_or(0);
        if mine >= limits.max_per_peer {
            return Err(Refused::new("too_many_connections", format!("member {peer} already has {mine} connections open (max {}); closed", limits.max_per_peer)));
        }
        if total >= limits.max_authenticated {
            return Err(Refused::new("too_many_connections", format!("{total} authenticated connections are open (max {}); closed", limits.max_authenticated)));
        }
        *m.entry(peer).or_default() += 1;
        Ok(Authenticated { open: open.clone(), peer })
    }
}

impl Drop for Authenticated {
    fn drop(&mut self) {
        let mut m = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = m.get_mut(&self.peer) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.peer);
            }
        }
    }
}

/// Decrements the count of connections in their handshake when dropped.
pub(super) struct Unauthenticated(pub(super) Arc<AtomicUsize>);

impl Drop for Unauthenticated {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
