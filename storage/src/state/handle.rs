//! The state machine's RocksDB behind a handle that can be swapped while the process
//! runs: how a member installs a snapshot by moving the received checkpoint into place
//! and opening it, instead of writing every byte of it once more into the open database.
//!
//! Everyone who reads or writes takes the current database for one operation
//! ([`Handle::get`], a [`Db`] guard); nothing keeps a database (or a column family
//! handle, which belongs to one database) beyond that. [`Handle::swap`]:
//!
//! 1. marks the handle *swapping*: from then on a thread that takes the database waits;
//! 2. waits until the guards taken before are dropped (operations under way finish on
//!    the old database, which stays open and whole under them);
//! 3. closes the old database (RocksDB's files and its lock on the directory released:
//!    RocksDB refuses a second open of a directory in one process, and a database still
//!    open could write into a directory that is no longer its own);
//! 4. runs the caller's step (renaming directories) and opens the database at the path;
//! 5. makes it current and wakes the waiting threads.
//!
//! A thread that already holds a guard and takes the database again (a method calling
//! another) gets the database it holds, without waiting: so one operation never mixes
//! two databases, and a nested call during a swap cannot deadlock against the swap
//! waiting for it. The swap itself refuses to run on a thread that holds a guard.
//!
//! If step 4 fails, the handle is closed: every later operation is an error naming the
//! cause until a later swap opens a database again (steps 2 and 3 are then void). The
//! caller tries again (a member whose install met a full disk, once space is back) or
//! stops, and the start-up recovery (`snapshot::recover_at_start`) finishes or undoes
//! the directory swap.

use std::cell::RefCell;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rocksdb::{ColumnFamily, IteratorMode, DB};

use crate::error::{Error, Result};

/// One key and value as RocksDB's iterators yield them.
pub(super) type Item = std::result::Result<(Box<[u8]>, Box<[u8]>), rocksdb::Error>;

enum Slot {
    Open(Arc<DB>),
    Swapping,
    Closed(String),
}

/// The current database of a state machine.
pub(super) struct Handle {
    slot: Mutex<Slot>,
    changed: Condvar,
}

/// The databases this thread holds guards on, by handle: (handle address, database,
/// guards alive).
struct Held {
    handle: usize,
    db: Arc<DB>,
    depth: usize,
}

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// The database for one operation (derefs to RocksDB's `DB`). It stays on the thread
/// that took it (not `Send`): its drop counts down that thread's guards.
pub(super) struct Db<'a> {
    db: Arc<DB>,
    handle: &'a Handle,
    _here: PhantomData<*const ()>,
}

impl Deref for Db<'_> {
    type Target = DB;
    fn deref(&self) -> &DB {
        &self.db
    }
}

impl Drop for Db<'_> {
    fn drop(&mut self) {
        let key = self.handle.key();
        let _ = HELD.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().position(|e| e.handle == key) {
                h[i].depth -= 1;
                if h[i].depth == 0 {
                    h.swap_remove(i);
                }
            }
        });
    }
}

impl Db<'_> {
    /// Column family `name` of this database.
    pub(super) fn cf(&self, name: &str) -> Result<&ColumnFamily> {
        self.db.cf_handle(name).ok_or_else(|| Error::Invalid(format!("column family {name} missing")))
    }

    /// Every item of family `name`, in key order; none if this database (an older
    /// checkpoint opened read-only) lacks the family.
    pub(super) fn items_of(&self, name: &str) -> impl Iterator<Item = Item> + '_ {
        self.db.cf_handle(name).into_iter().flat_map(|cf| self.db.iterator_cf(cf, IteratorMode::Start))
    }
}

impl Handle {
    pub(super) fn new(db: DB) -> Handle {
        Handle { slot: Mutex::new(Slot::Open(Arc::new(db))), changed: Condvar::new() }
    }

    fn key(&self) -> usize {
        self as *const Handle as usize
    }

    fn held(&self) -> Option<Arc<DB>> {
        let key = self.key();
        HELD.with(|h| {
            h.borrow_mut().iter_mut().find(|e| e.handle == key).map(|e| {
                e.depth += 1;
                e.db.clone()
            })
        })
    }

    /// The current database, for one operation: the one this thread already holds if
    /// it holds one; otherwise the current one, waiting while a swap is under way.
    pub(super) fn get(&self) -> Result<Db<'_>> {
        if let Some(db) = self.held() {
            return Ok(Db { db, handle: self, _here: PhantomData });
        }
        let db = {
            let mut s = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                match &*s {
                    Slot::Open(db) => break db.clone(),
                    Slot::Swapping => s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
                    Slot::Closed(why) => return Err(Error::Invalid(format!("the state machine is closed: {why}"))),
                }
            }
        };
        HELD.with(|h| h.borrow_mut().push(Held { handle: self.key(), db: db.clone(), depth: 1 }));
        Ok(Db { db, handle: self, _here: PhantomData })
    }

    /// Whether a swap is under way (tests wait for it).
    #[cfg(test)]
    pub(super) fn swapping(&self) -> bool {
        matches!(*self.slot.lock().unwrap_or_else(|p| p.into_inner()), Slot::Swapping)
    }

    /// Closes the current database once no operation uses it, then makes the database
    /// `reopen` returns current (see the module docs). `reopen` runs with no database
    /// open; if it fails the handle stays closed and the error is returned.
    pub(super) fn swap(&self, reopen: impl FnOnce() -> Result<DB>) -> Result<()> {
        self.swap_then(reopen, || Ok(()))
    }

    /// [`Handle::swap`], then `then` runs on this thread with the new database (its
    /// operations take it) while every other thread still waits; the new database is
    /// current for them once `then` returns, whatever it returns (or if it panics).
    pub(super) fn swap_then<T, E: From<Error>>(&self, reopen: impl FnOnce() -> Result<DB>, then: impl FnOnce() -> std::result::Result<T, E>) -> std::result::Result<T, E> {
        if HELD.with(|h| h.borrow().iter().any(|e| e.handle == self.key())) {
            return Err(Error::Invalid("the state machine's database cannot be swapped by an operation that uses it".into()).into());
        }
        let old = {
            let mut s = self.slot.lock().unwrap_or_else(|p| p.into_inner());
            match std::mem::replace(&mut *s, Slot::Swapping) {
                Slot::Open(db) => Some(db),
                Slot::Swapping => return Err(Error::Invalid("a swap of the state machine's database is already under way".into()).into()),
                // A failed open before: nothing to close.
                Slot::Closed(_) => None,
            }
        };
        // Operations that took the old database before finish on it.
        if let Some(old) = old {
            while Arc::strong_count(&old) > 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
            drop(old);
        }
        let db = match reopen() {
            Ok(db) => Arc::new(db),
            Err(e) => {
                *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Closed(e.to_string());
                self.changed.notify_all();
                return Err(e.into());
            }
        };
        HELD.with(|h| h.borrow_mut().push(Held { handle: self.key(), db: db.clone(), depth: 1 }));
        let _current = Current { handle: self, db: Some(db) };
        then()
    }
}

/// Makes a swapped-in database current when dropped: this thread's hold on it ends,
/// waiting threads are woken.
struct Current<'a> {
    handle: &'a Handle,
    db: Option<Arc<DB>>,
}

impl Drop for Current<'_> {
    fn drop(&mut self) {
        let key = self.handle.key();
        let _ = HELD.try_with(|h| h.borrow_mut().retain(|e| e.handle != key));
        if let Some(db) = self.db.take() {
            *self.handle.slot.lock().unwrap_or_else(|p| p.into_inner()) = Slot::Open(db);
        }
        self.handle.changed.notify_all();
    }
}
