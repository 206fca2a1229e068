//! The "Coming from Salt" section of `docs/operations.md`, made from the table. The
//! unit test `config_keys::tests::doc_matches_the_table` checks the file holds exactly
//! this text between its markers; with `HALITE_BLESS=1` it writes it there.

use super::{salt_options, CHECKS, HONOURED, NOT_IMPLEMENTED, NO_EFFECT};

pub const BEGIN: &str = "<!-- coming-from-salt: begin (generated from master/src/config_keys/table.rs) -->";
pub const END: &str = "<!-- coming-from-salt: end -->";

fn keys(list: &[&str]) -> String {
    let mut v: Vec<&str> = list.to_vec();
    v.sort_unstable();
    v.iter()
        .map(|k| match CHECKS.iter().any(|(c, _, _)| c == k) {
            true => format!("`{k}`*"),
            false => format!("`{k}`"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The section's text, markers included.
pub fn section() -> String {
    let mut s = String::new();
    s.push_str(BEGIN);
    s.push('\n');
    s.push_str(&format!(
        "Every option of Salt {} (`testdata/salt-3008.5/master_opts.json`, written by\n\
         `scripts/salt-master-opts.py`) and Halite's own are in one of these lists\n\
         (`master/src/config_keys/table.rs`; regenerate this section with\n\
         `HALITE_BLESS=1 cargo test -p halite-master --lib config_keys::tests::doc_matches_the_table`).\n\n",
        salt_options().version
    ));
    s.push_str(&format!("**Honoured** (read and acted on): {}.\n\n", keys(HONOURED)));
    s.push_str("**Accepted with no effect, by design:**\n\n");
    for (why, list) in NO_EFFECT {
        s.push_str(&format!("- {}: {why}.\n", keys(list)));
    }
    s.push_str("\n**Not implemented.** Halite behaves as Salt does with the option's default, or, for\nthe ones marked *, as:\n\n");
    for (k, accepted, _) in CHECKS {
        s.push_str(&format!("- `{k}`: {accepted};\n"));
    }
    s.push_str("\nany other value is named in a warning at start and makes `--check-config` exit 1:\n\n");
    for (what, list) in NOT_IMPLEMENTED {
        s.push_str(&format!("- {what}: {}.\n", keys(list)));
    }
    s.push_str(
        "\nAny other option is **unknown**: a warning at start calls it a likely typo (or, for an\n\
         option Salt knows only for minions or salt-ssh, one a master does not read); it does\n\
         not change the exit code of `--check-config`.\n",
    );
    s.push_str(END);
    s
}
