//! Jobs: jids, the minions a target is expected to reach, job cache expiry.

use halite_storage::keys::BankState;
use halite_storage::state::StateRead;

use crate::glob::fnmatch;

/// Whether an applied job record is published to minions: only jobs the master's
/// operator started (`salt`, through the admin socket). A job a minion started itself
/// (a return with jid `req`, stored with `started_by`) is only stored; publishing it
/// would run it a second time, hand its return data to every minion, and let a minion
/// choose what the master signs and sends to others.
pub fn publishable(job: &halite_storage::format::JobPublished) -> bool {
    job.started_by.is_none()
}

/// A publish's arguments as Salt's client sends them: the keyword arguments, when there
/// are any, as a last mapping marked `__kwarg__`.
pub fn args_with_kwarg(mut args: Vec<serde_json::Value>, kwarg: serde_json::Map<String, serde_json::Value>) -> Vec<serde_json::Value> {
    if !kwarg.is_empty() {
        let mut k = kwarg;
        k.insert("__kwarg__".into(), serde_json::Value::Bool(true));
        args.push(serde_json::Value::Object(k));
    }
    args
}

/// A new jid: the UTC time as `YYYYMMDDhhmmssffffff` (20 digits).
pub fn new_jid() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Strictly increasing within the process: two jobs in the same microsecond (a burst
    // of scheduled-job returns, say) still get distinct jids.
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
    let mut prev = LAST.load(Ordering::Relaxed);
    let micros = loop {
        let next = now.max(prev + 1);
        match LAST.compare_exchange_weak(prev, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(p) => prev = p,
        }
    };
    jid_at(micros)
}

/// The jid of an instant, in microseconds since the epoch (UTC).
pub fn jid_at(micros: u64) -> String {
    let secs = (micros / 1_000_000) as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}{m:02}{d:02}{:02}{:02}{:02}{:06}", rem / 3600, rem % 3600 / 60, rem % 60, micros % 1_000_000)
}

/// The `JobsExpired` record due now, if the job cache holds anything older than
/// `keep_jobs_seconds` (0 keeps jobs forever, as in Salt).
pub fn expiry_due(sm: &halite_storage::state::StateMachine, keep_jobs_seconds: u64) -> Option<halite_storage::format::Record> {
    if keep_jobs_seconds == 0 {
        return None;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros() as u64;
    let cutoff = jid_at(now.saturating_sub(keep_jobs_seconds.saturating_mul(1_000_000)));
    match sm.has_job_before(&cutoff) {
        Ok(true) => Some(halite_storage::format::Record::JobsExpired(halite_storage::format::JobsExpired { before_jid: cutoff, time_ns: halite_storage::format::now_ns() })),
        Ok(false) => None,
        Err(e) => {
            tracing::error!("job cache expiry: cannot read the job cache: {e}");
            None
        }
    }
}

/// Days since 1970-01-01 to a (year, month, day) in the proleptic Gregorian calendar.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Whether a target reads the minion data cache (grains or pillar): grain, pillar and
/// ipcidr types, or a compound with such a word. With `minion_data_cache: False` the
/// master cannot resolve it and expects every accepted minion (Salt's greedy rule); the
/// minions match it themselves.
pub fn reads_minion_data(tgt: &serde_json::Value, tgt_type: &str) -> bool {
    match tgt_type {
        "grain" | "grain_pcre" | "pillar" | "pillar_pcre" | "pillar_exact" | "ipcidr" => true,
        "compound" | "compound_pillar_exact" => tgt.as_str().is_some_and(|t| t.split_whitespace().any(|w| ["G@", "P@", "I@", "J@", "S@"].iter().any(|e| w.starts_with(e)))),
        _ => false,
    }
}

/// The minions a target is expected to reach, from the accepted keys and the grains they
/// reported (best effort: the minions decide for themselves), and the listed ids that are
/// not accepted.
pub fn expected_minions(sm: &dyn StateRead, tgt: &serde_json::Value, tgt_type: &str) -> halite_storage::Result<(Vec<String>, Vec<String>)> {
    let accepted: Vec<String> = sm.ids_in(BankState::Accepted)?;
    let mut missing = Vec::new();
    let hit: Vec<String> = match tgt_type {
        "glob" => {
            let pat = tgt.as_str().unwrap_or("");
            accepted.into_iter().filter(|id| fnmatch(pat, id)).collect()
        }
        "list" => {
            let wanted: Vec<String> = match tgt {
                serde_json::Value::Array(a) => a.iter().filter_map(|v| v.as_str().map(String::from)).collect(),
                serde_json::Value::String(s) => s.split(',').map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect(),
                _ => Vec::new(),
            };
            let mut out = Vec::new();
            for w in wanted {
                if accepted.contains(&w) {
                    out.push(w);
                } else {
                    missing.push(w);
                }
            }
            out
        }
        other => {
            let empty = serde_json::Value::Object(Default::default());
            let pattern = match tgt {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            let mut out = Vec::new();
            let decode = |b: Option<Vec<u8>>| match b {
                Some(b) => crate::wire::payload::decode(&b).map(|v| crate::wire::payload::to_json(&v)).unwrap_or(empty.clone()),
                None => empty.clone(),
            };
            let wants_pillar = other.starts_with("pillar") || (other == "compound" && (pattern.contains("I@") || pattern.contains("J@")));
            for id in accepted {
                // Grain and pillar targets match what the master cached for the minion
                // (the grains it reported, the pillar last compiled for it); a minion with
                // nothing cached matches no such expression (Salt's rule).
                let grains = decode(sm.grains(&id)?);
                let pillar = if wants_pillar { decode(sm.pillar(&id)?) } else { empty.clone() };
                let subject = crate::matcher::Subject { id: &id, grains: &grains, pillar: &pillar };
                if crate::matcher::matches(&subject, &pattern, other) {
                    out.push(id);
                }
            }
            out
        }
    };
    Ok((hit, missing))
}

#[cfg(test)]
mod tests {
    #[test]
    fn jid_shape_and_calendar() {
        let j = super::new_jid();
        assert_eq!(j.len(), 20);
        assert!(j.starts_with("20"));
        assert_eq!(super::civil_from_days(0), (1970, 1, 1));
        assert_eq!(super::civil_from_days(20_779), (2026, 11, 22));
        assert_eq!(super::civil_from_days(11_016), (2000, 2, 29));
    }
}
