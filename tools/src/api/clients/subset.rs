//! `local_subset`: Salt's `cmd_subset`. The target is asked for `sys.list_functions`
//! (as the caller: the rules must allow it); of the minions that answered with `fun`
//! among their functions, `subset` are picked at random and run the call, as `local`
//! does; the answer is `{minion: return}`, `false` for a picked minion that did not
//! return in time (Salt's `cmd`).

use std::collections::BTreeSet;

use rand::seq::SliceRandom;
use serde_json::{json, Map, Value as J};

use super::local::{publish, ret_of, with_silent, Call, Follow};
use super::{count, ApiConfig, ApiError, Rules, Session};

/// Most minions a `subset` may ask for.
pub const MAX_SUBSET: u64 = 100_000;

/// `subset` (or Salt's older `sub`): a whole number, 1 to [`MAX_SUBSET`]; Salt's
/// default 3.
pub fn parse(chunk: &Map<String, J>) -> Result<usize, ApiError> {
    match chunk.get("subset").filter(|v| !v.is_null()).or_else(|| chunk.get("sub").filter(|v| !v.is_null())) {
        None => Ok(3),
        Some(v) => Ok(count(v, "subset", MAX_SUBSET)? as usize),
    }
}

/// Whether a `sys.list_functions` return names `fun` (a list of names; Salt's `in`
/// also reads a map's keys).
fn has(functions: &J, fun: &str) -> bool {
    match functions {
        J::Array(a) => a.iter().any(|f| f.as_str() == Some(fun)),
        J::Object(m) => m.contains_key(fun),
        _ => false,
    }
}

pub async fn answer(cfg: &ApiConfig, s: &Session, c: &Call, n: usize) -> Result<J, ApiError> {
    let rules = Rules::load(cfg, s).await?;
    let none = Map::new();
    rules.check(cfg, "sys.list_functions", &[], &none, &c.tgt, &c.tgt_type).await?;
    let timeout = c.timeout(cfg);
    let Some(p) = publish(cfg, s, &c.tgt, &c.tgt_type, "sys.list_functions", &[], &none, &none).await? else { return Ok(json!({})) };
    let (answered, _) = Follow::open(cfg, &p.jid, timeout).await?.collect().await?;
    let mut able: Vec<String> = answered.into_iter().filter(|(_, load)| has(&ret_of(load), &c.fun)).map(|(id, _)| id).collect();
    able.sort();
    able.dedup();
    able.shuffle(&mut rand::thread_rng());
    able.truncate(n);
    if able.is_empty() {
        return Ok(json!({}));
    }
    let picked: BTreeSet<String> = able.iter().cloned().collect();
    rules.check_on(&c.fun, &c.arg, &c.kwarg, &picked)?;
    let list = J::Array(able.into_iter().map(J::String).collect());
    let Some(p) = publish(cfg, s, &list, "list", &c.fun, &c.arg, &c.kwarg, &c.publish_opts).await? else { return Ok(json!({})) };
    let (got, _) = Follow::open(cfg, &p.jid, timeout).await?.collect().await?;
    Ok(J::Object(with_silent(got, &p.minions, c.full_return)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn functions_lists_and_maps() {
        assert!(has(&json!(["test.ping", "test.arg"]), "test.arg"));
        assert!(!has(&json!(["test.ping"]), "test.arg"));
        assert!(has(&json!({"test.arg": "doc"}), "test.arg"));
        assert!(!has(&json!(false), "test.arg"), "a minion that failed to answer");
        assert!(!has(&json!("test.arg"), "test.arg"));
    }
}
