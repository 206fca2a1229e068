//! `salt-run schedule.list`: the master's own `schedule` option as read
//! ([`crate::schedule`]), each enabled job with its next firing time (`_next_fire_time`,
//! seconds since the epoch), as the minion's `schedule.list` shows its jobs.

use serde_json::json;

use super::{AdminView, Plan};
use crate::error::Result;
use crate::schedule::Schedule;

pub fn list(view: &dyn AdminView) -> Result<Plan> {
    let s = Schedule::from_option(view.config().raw.get("schedule"));
    Ok(Plan::answer(json!({ "return": { "schedule": s.listing(view.now_ns() / 1_000_000_000) } })))
}
