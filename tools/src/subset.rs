//! Salt's `cmd_subset`, the choice it makes: of the minions that answered
//! `sys.list_functions`, `n` that have the function, picked at random. `salt --subset N`
//! (`bin/salt`) and salt-api's `local_subset` (`halite_api::clients::subset`) each ask the
//! target over their own connection and run the call on the minions [`pick`] returns.
//!
//! As Salt 3008.5: a minion that did not answer in time is never picked; a minion whose
//! answer is not a list or a map of function names (an error text) is skipped; fewer
//! able minions than asked gives all of them; none gives no call at all.

use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::Value as J;

/// Most minions a `subset` may ask for.
pub const MAX_SUBSET: u64 = 100_000;
/// Salt's `subset` when none is given.
pub const DEFAULT_SUBSET: usize = 3;

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
    fn the_cli_option() {
        assert_eq!(of_cli(0), None, "salt's --subset 0 is no subset");
        assert_eq!(of_cli(2), Some(2));
    }
}
