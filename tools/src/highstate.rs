//! Salt's `highstate` outputter (with Salt's defaults `state_verbose: True`,
//! `state_output: full`, `state_output_profile: True`, no colours): per host its
//! states in run order (ID, Function, Name when it differs from the ID, Result,
//! Comment, Started, Duration, Changes: nested, or for a `salt.state` step the minions'
//! own highstates inside), then the Summary. `salt-run state.orchestrate` prints its
//! run with it.

use serde_json::{Map, Value};

use crate::output::nested;

/// Formats `{host: {tag: state return}}` (or `{host: [errors]}`).
pub fn render(data: &Map<String, Value>) -> String {
    data.iter()
        .map(|(h, d)| host(h, d).0)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One host's block, and whether anything changed.
fn host(name: &str, data: &Value) -> (String, bool) {
    let mut lines = vec![format!("{name}:")];
    let states = match data {
        Value::Array(errs) => {
            lines.push("    Data failed to compile:".into());
            for e in errs {
                lines.push(format!(
                    "----------\n    {}",
                    e.as_str()
                        .map(String::from)
                        .unwrap_or_else(|| e.to_string())
                ));
            }
            return (lines.join("\n"), false);
        }
        Value::Object(m) => m,
        other => {
            lines.push(format!(
                "    {}",
                other
                    .as_str()
                    .map(String::from)
                    .unwrap_or_else(|| other.to_string())
            ));
            return (lines.join("\n"), true);
        }
    };
    let mut tags: Vec<(&String, &Value)> = states
        .iter()
        .filter(|(_, v)| v.get("result").is_some())
        .collect();
    tags.sort_by_key(|(_, v)| v["__run_num__"].as_u64().unwrap_or(0));
    let (mut ok, mut failed, mut not_run, mut nchanges, mut total_ms) =
        (0usize, 0usize, 0usize, 0usize, 0f64);
    for (tag, ret) in tags {
        match ret["result"] {
            Value::Bool(true) => ok += 1,
            Value::Bool(false) => failed += 1,
            _ => not_run += 1,
        }
        total_ms += ret["duration"].as_f64().unwrap_or(0.0);
        let (changed, ctext) = changes(&ret["changes"]);
        nchanges += changed as usize;
        let comps: Vec<&str> = tag.split("_|-").collect();
        let part = |i: usize| comps.get(i).copied().unwrap_or("");
        lines.push("----------".into());
        lines.push(format!("          ID: {}", part(1)));
        lines.push(format!("    Function: {}.{}", part(0), part(3)));
        if part(1) != part(2) {
            lines.push(format!("        Name: {}", part(2)));
        }
        let result = match &ret["result"] {
            Value::Bool(true) => "True",
            Value::Bool(false) => "False",
            _ => "None",
        };
        lines.push(format!("      Result: {result}"));
        let comment = ret["comment"]
            .as_str()
            .map(String::from)
            .unwrap_or_else(|| ret["comment"].to_string());
        lines.push(format!(
            "     Comment: {}",
            comment
                .trim()
                .replace('\n', &format!("\n{}", " ".repeat(14)))
        ));
        lines.push(format!(
            "     Started: {}",
            ret["start_time"].as_str().unwrap_or("")
        ));
        lines.push(format!("    Duration: {} ms", ret["duration"]));
        lines.push(format!("     Changes:   {ctext}"));
    }
    let counts = [ok + not_run, failed];
    let width = 9
        + counts
            .iter()
            .chain([&(ok + failed + not_run)])
            .map(|c| c.to_string().len())
            .max()
            .unwrap_or(1)
        + 2;
    let count = |label: &str, n: usize| format!("{label}: {n:>w$}", w = width - (label.len() + 2));
    lines.push(format!("\nSummary for {name}\n{}", "-".repeat(width)));
    let changed = if nchanges > 0 {
        format!(" (changed={nchanges})")
    } else {
        String::new()
    };
    lines.push(count("Succeeded", ok + not_run) + &changed);
    lines.push(count("Failed", failed));
    lines.push(format!(
        "{}\nTotal states run: {:>w$}",
        "-".repeat(width),
        ok + failed + not_run,
        w = width - 7
    ));
    let (t, unit) = if total_ms > 999.0 {
        (total_ms / 1000.0, "s")
    } else {
        (total_ms, "ms")
    };
    lines.push(format!(
        "Total run time: {:>w$} {unit}",
        format!("{t:.3}"),
        w = width - 5
    ));
    (lines.join("\n"), nchanges > 0)
}

/// A state's changes: a `salt.state` step's minions' highstates nested, anything
/// else through the nested outputter 14 columns in.
fn changes(c: &Value) -> (bool, String) {
    let empty = match c {
        Value::Null => true,
        Value::Object(m) => m.is_empty(),
        _ => false,
    };
    if empty {
        return (false, String::new());
    }
    if c["out"] == "highstate" {
        if let Some(ret) = c["ret"].as_object() {
            let mut text = String::new();
            let mut changed = false;
            for (h, d) in ret {
                let (s, ch) = host(h, d);
                changed |= ch;
                for l in s.lines() {
                    text.push('\n');
                    text.push_str(&" ".repeat(14));
                    text.push_str(l);
                }
            }
            return (changed, text);
        }
    }
    (true, format!("\n{}", nested(c, 14)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_run_prints_as_salts_highstate() {
        let data = json!({"h_master": {
            "salt_|-w_|-cmd.run_|-function": {"name": "cmd.run", "result": true, "comment": "Function ran successfully. Function cmd.run ran on m1.", "changes": {"ret": {"m1": ""}}, "__run_num__": 0, "start_time": "01:02:03.000004", "duration": 12.5, "__id__": "w"},
            "salt_|-b_|-b_|-state": {"name": "b", "result": false, "comment": "One or more requisite failed: o.w", "changes": {}, "__run_num__": 1, "start_time": "01:02:04.000000", "duration": 0.0, "__id__": "b"}
        }});
        let out = render(data.as_object().unwrap());
        let want = "h_master:\n----------\n          ID: w\n    Function: salt.function\n        Name: cmd.run\n      Result: True\n     Comment: Function ran successfully. Function cmd.run ran on m1.\n     Started: 01:02:03.000004\n    Duration: 12.5 ms\n     Changes:   \n              ----------\n              ret:\n                  ----------\n                  m1:\n----------\n          ID: b\n    Function: salt.state\n      Result: False\n     Comment: One or more requisite failed: o.w\n     Started: 01:02:04.000000\n    Duration: 0.0 ms\n     Changes:   \n\nSummary for h_master\n------------\nSucceeded: 1 (changed=1)\nFailed:    1\n------------\nTotal states run:     2\nTotal run time:  12.500 ms";
        assert_eq!(out, want, "\n{out}");
    }
}
