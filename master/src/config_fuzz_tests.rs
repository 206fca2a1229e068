//! Fuzzing of the config file (`config.rs`), as property tests: arbitrary bytes as the
//! `master` file, a working config with one byte changed, and every known option given
//! a value of any YAML type. What must hold: `MasterConfig::load` never panics; it
//! answers a config or a clear error naming the file (and the option, when one is at
//! fault). The long run is `docs/benchmarks.md`'s ("Hostile-input bounds"). It found that a huge
//! `keep_jobs` (hours) overflowed its conversion to seconds.

use proptest::prelude::*;
use serde_yaml::{Mapping, Value};

use super::{ConfigError, MasterConfig};
use crate::config_keys::HONOURED as KNOWN;

const GOOD: &str = "id: m1\ninterface: 127.0.0.1\npublish_port: 4505\nret_port: 4506\nauto_accept: False\n\
file_roots:\n  base:\n    - /srv/salt\n  dev: [/srv/dev]\npillar_roots:\n  base: /srv/pillar\n\
keys.cache_driver: mmap_key\nmmap_key_size: 4096\ncluster_id: c1\ncluster_peers:\n  - 127.0.0.2\n  - 127.0.0.3\n\
cluster_secret: s3cret\nhalite_max_request_bytes: 1048576\nkeep_jobs_seconds: 3600\nlog_level: warning\n";

fn load(text: &[u8]) -> Result<MasterConfig, ConfigError> {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("master"), text).unwrap();
    MasterConfig::load(d.path())
}

fn any_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| Value::Number(n.into())),
        any::<u64>().prop_map(|n| Value::Number(n.into())),
        any::<f64>().prop_map(|n| Value::Number(n.into())),
        ".{0,40}".prop_map(Value::String),
        Just(Value::String("None".into())),
        Just(Value::String("../..".into())),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Sequence),
            proptest::collection::vec((".{0,12}", inner), 0..4).prop_map(|kv| Value::Mapping(kv.into_iter().map(|(k, v)| (Value::String(k), v)).collect::<Mapping>())),
        ]
    })
}

proptest! {
    #[test]
    fn fuzz_config_bytes(raw in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = load(&raw);
    }

    #[test]
    fn fuzz_config_mutated(pos in any::<usize>(), val in any::<u8>(), cut in any::<usize>()) {
        prop_assert!(load(GOOD.as_bytes()).is_ok(), "the base config loads");
        let mut b = GOOD.as_bytes().to_vec();
        let p = pos % b.len();
        b[p] = val;
        let _ = load(&b);
        let _ = load(&b[..cut % (b.len() + 1)]);
    }

    #[test]
    fn fuzz_config_option_values(opts in proptest::collection::vec((0..KNOWN.len(), any_value()), 1..6)) {
        let d = tempfile::tempdir().unwrap();
        let mut m = Mapping::new();
        for (k, v) in opts {
            // An include pointing anywhere is the operator's business; keep it in the dir.
            if KNOWN[k] == "include" || KNOWN[k] == "default_include" {
                continue;
            }
            m.insert(Value::String(KNOWN[k].into()), v);
        }
        match MasterConfig::from_mapping(d.path(), m, Default::default()) {
            // What Halite does with each option is reported for any value.
            Ok(c) => prop_assert!(!crate::config_keys::Report::of(&c, None).text().is_empty()),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
