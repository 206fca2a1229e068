//! `salt --summary`: the counts Salt prints after a job's returns.
//!
//! ```text
//! (two empty lines)
//! -------------------------------------------
//! Summary
//! -------------------------------------------
//! # of minions targeted: 3
//! # of minions returned: 2
//! # of minions that did not return: 1
//! # of minions with errors: 1
//! -------------------------------------------
//! ```
//!
//! With `-v`, the ids of the minions not responding and of those with failures (a
//! non-zero retcode) follow the counts, as Salt prints them. Salt prints it only when
//! no `--out` is given, and not for `sys.doc`, `--static` or `--batch`.

/// What a job's returns add up to, in the order they came.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    returned: usize,
    not_responding: Vec<String>,
    failed: Vec<String>,
}

const RULE: &str = "-------------------------------------------";

impl Summary {
    /// A minion returned with `retcode`.
    pub fn returned(&mut self, id: &str, retcode: i64) {
        self.returned += 1;
        if retcode != 0 {
            self.failed.push(id.to_string());
        }
    }

    /// A minion did not return (and is reported as not returning).
    pub fn missing(&mut self, id: &str) {
        self.not_responding.push(id.to_string());
    }

    /// The text Salt prints (each line ending in a line break).
    pub fn render(&self, verbose: bool) -> String {
        let missing = self.not_responding.len();
        let mut s = format!(
            "\n\n{RULE}\nSummary\n{RULE}\n# of minions targeted: {}\n# of minions returned: {}\n# of minions that did not return: {missing}\n# of minions with errors: {}\n",
            self.returned + missing,
            self.returned,
            self.failed.len()
        );
        if verbose {
            if !self.not_responding.is_empty() {
                s.push_str(&format!("Minions not responding: {}\n", self.not_responding.join(" ")));
            }
            if !self.failed.is_empty() {
                s.push_str(&format!("Minions with failures: {}\n", self.failed.join(" ")));
            }
        }
        s.push_str(RULE);
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_counts_as_salt_prints_them() {
        let mut s = Summary::default();
        s.returned("web1", 0);
        s.returned("db1", 1);
        s.missing("gone");
        let plain = s.render(false);
        assert_eq!(plain, "\n\n-------------------------------------------\nSummary\n-------------------------------------------\n# of minions targeted: 3\n# of minions returned: 2\n# of minions that did not return: 1\n# of minions with errors: 1\n-------------------------------------------\n");
        let v = s.render(true);
        assert!(v.ends_with("# of minions with errors: 1\nMinions not responding: gone\nMinions with failures: db1\n-------------------------------------------\n"), "{v}");
        assert!(Summary::default().render(true).contains("# of minions targeted: 0\n"));
    }
}
