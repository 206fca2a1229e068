//! Salt's `cmd_subset`, the choice it makes: of the minions that answered
//! `sys.list_functions`, `n` that have the function, picked at random. `salt --subset N`
//! (`bin/salt`) and salt-api's `local_subset` (`api::clients::subset`) each ask the
//! target over their own connection and run the call on the minions [`pick`] returns.
//!
//! As Salt 3008.5: a minion that did not answer in time is never picked; a minion whose
//! answer is not a list or a map of function names (an error text) is skipped; fewer
//! able minions than asked gives all of them; none gives no call at all.

use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::{Map, Value as J};

use crate::api::clients::count;
use crate::api::reply::ApiError;

/// Most minions a `subset` may ask for.
pub const MAX_SUBSET: u64 = 100_000;
/// Salt's `subset` when none is given.
pub const DEFAULT_SUBSET: usize = 3;

/// A lowstate's `subset` (or Salt's older `sub`, which wins when both are given, as
/// `cmd_subset` reads it): a whole number, 1 to [`MAX_SUBSET`]; [`DEFAULT_SUBSET`] when
/// neither is there.
pub fn parse(chunk: &Map<String, J>) -> Result<usize, ApiError> {
    let given = |k: &str| chunk.get(k).filter(|v| !v.is_null());
    match given("sub").or_else(|| given("subset")) {
        None => Ok(DEFAULT_SUBSET),
        Some(v) => Ok(count(v, "subset", MAX_SUBSET)? as usize),
    }
}

/// `salt --subset N`: `0` (the option's default) takes no subset.
pub fn of_cli(n: usize) -> Option<usize> {
    (n > 0).then_some(n)
}

/// Whether a `sys.list_functions` return names `fun` (a list of names; Salt's `in`
/// also reads a map's keys).
pub fn has(functions: &J, fun: &str) -> bool {
    match functions {
        J::Array(a) => a.iter().any(|f| f.as_str() == Some(fun)),
        J::Object(m) => m.contains_key(fun),
        _ => false,
    }
}

/// Of `answered` (each minion that answered `sys.list_functions`, with its return),
/// at most `n` that have `fun`, each once, in a random order.
pub fn pick(answered: impl IntoIterator<Item = (String, J)>, fun: &str, n: usize, rng: &mut impl Rng) -> Vec<String> {
    let mut able: Vec<String> = answered.into_iter().filter(|(_, functions)| has(functions, fun)).map(|(id, _)| id).collect();
    able.sort();
    able.dedup();
    able.shuffle(rng);
    able.truncate(n);
    able
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::rngs::StdRng;
    use rand::SeedableRng;
    use serde_json::json;

    use super::*;

    fn answered() -> Vec<(String, J)> {
        vec![
            ("a".into(), json!(["test.ping", "test.arg"])),
            ("b".into(), json!({"test.arg": "doc", "test.ping": "doc"})),
            ("c".into(), json!(["test.ping"])),
            ("d".into(), json!("'sys.list_functions' is not available.")),
            ("e".into(), json!(["test.arg"])),
            ("e".into(), json!(["test.arg"])),
        ]
    }

    #[test]
    fn functions_lists_and_maps() {
        assert!(has(&json!(["test.ping", "test.arg"]), "test.arg"));
        assert!(!has(&json!(["test.ping"]), "test.arg"));
        assert!(has(&json!({"test.arg": "doc"}), "test.arg"));
        assert!(!has(&json!(false), "test.arg"), "a minion that failed to answer");
        assert!(!has(&json!("test.arg"), "test.arg"), "an error text is not a list of names");
    }

    #[test]
    fn only_minions_with_the_function_are_picked_each_once() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            let p = pick(answered(), "test.arg", 2, &mut rng);
            assert_eq!(p.len(), 2, "{p:?}");
            assert_ne!(p[0], p[1], "{p:?}");
            assert!(p.iter().all(|id| ["a", "b", "e"].contains(&id.as_str())), "{p:?}");
            seen.extend(p);
        }
        assert_eq!(seen, BTreeSet::from(["a".to_string(), "b".into(), "e".into()]), "every able minion can be picked");
    }

    #[test]
    fn more_asked_than_able_gives_all_of_them_and_none_gives_nothing() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut all = pick(answered(), "test.arg", 10, &mut rng);
        all.sort();
        assert_eq!(all, ["a", "b", "e"]);
        assert!(pick(answered(), "nosuch.function", 3, &mut rng).is_empty());
        // A minion that did not answer is not among `answered`: never picked.
        assert!(pick(Vec::new(), "test.arg", 3, &mut rng).is_empty());
    }

    #[test]
    fn the_subset_argument() {
        let n = |c: J| parse(c.as_object().unwrap());
        assert_eq!(n(json!({"subset": 1})), Ok(1));
        assert_eq!(n(json!({"subset": "2"})), Ok(2), "a form's string");
        assert_eq!(n(json!({"subset": null})), Ok(DEFAULT_SUBSET), "Salt's default");
        assert_eq!(n(json!({})), Ok(3));
        assert_eq!(n(json!({"sub": 4})), Ok(4), "Salt's older name");
        assert_eq!(n(json!({"sub": 4, "subset": 2})), Ok(4), "cmd_subset takes `sub` over `subset`");
        for bad in [json!(0), json!(-2), json!(2.5), json!(false), json!("two"), json!(MAX_SUBSET + 1), json!(u64::MAX), json!([1])] {
            let e = n(json!({ "subset": bad })).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert!(e.msg.starts_with("subset must be a whole number"), "{e:?}");
        }
        assert_eq!(of_cli(0), None, "salt's --subset 0 is no subset");
        assert_eq!(of_cli(2), Some(2));
    }
}
