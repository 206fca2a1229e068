//! The event bus and the reactor that reacts to it.

pub mod bus;
pub mod reactor;
